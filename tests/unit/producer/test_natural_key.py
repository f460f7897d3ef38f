"""Why the natural key: the field's original Cassandra key loses same-second receipts."""

from __future__ import annotations

from datetime import UTC, datetime

from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.schemas.contract import NATURAL_KEY, Receipt, parse_message


def test_the_fields_original_key_loses_same_second_receipts() -> None:
    """((year_day, operation_id), happened_at) overwrote receipts; the natural key does not."""
    result = simulate(
        SimulationConfig(
            count=1000,
            seed=7,
            start=datetime(2026, 3, 2, 8, tzinfo=UTC),
            faults=FaultConfig(burst_rate=0.2),
        )
    )
    receipts = [r for m in result.messages for r in [parse_message(m.value)]]
    assert all(isinstance(r, Receipt) for r in receipts) and len(receipts) == 1000
    old_table: dict[object, Receipt] = {}
    natural_table: dict[object, Receipt] = {}
    for r in receipts:
        assert isinstance(r, Receipt)
        # An upsert is a dict assignment: a second row with the same key replaces the first.
        old_table[((r.happened_at.timetuple().tm_yday, r.operation_id), r.happened_at)] = r
        natural_table[tuple(getattr(r, f) for f in NATURAL_KEY)] = r
    assert len(natural_table) == 1000
    lost = 1000 - len(old_table)
    # Each burst of k receipts in one store-second loses k - 1 of them at least.
    burst_losses = sum(f["receipts"] - 1 for f in result.faults if f["kind"] == "burst")
    assert lost >= burst_losses > 100
