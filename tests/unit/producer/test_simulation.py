"""The simulator's pure core against literal expectations."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from producer import ledger
from producer.simulation import FaultConfig, SimulationConfig, encode, simulate
from schemas.contract import Invalid, LineItem, Receipt, parse_message

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _run(count: int = 1000, seed: int = 7, **faults: float):  # type: ignore[no-untyped-def]
    return simulate(
        SimulationConfig(count=count, seed=seed, start=START, faults=FaultConfig(**faults))
    )


def _receipts(result) -> list[Receipt]:  # type: ignore[no-untyped-def]
    parsed = [parse_message(m.value) for m in result.messages]
    return [r for r in parsed if isinstance(r, Receipt)]


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a, b, c = _run(seed=1), _run(seed=1), _run(seed=2)
    assert [m.value for m in a.messages] == [m.value for m in b.messages]
    assert [m.value for m in a.messages] != [m.value for m in c.messages]


def test_knobs_off_means_no_faults_and_exactly_n_messages() -> None:
    result = _run(count=500)
    assert result.summary["faults"] == {
        "resend": 0, "burst": 0, "late": 0, "out_of_order": 0, "malformed": 0,
    }  # fmt: skip
    assert len(result.messages) == 500 == len(result.receipts)
    assert all(m.kind == "receipt" for m in result.messages)
    assert len({r.natural_key for r in _receipts(result)}) == 500


def test_receipt_numbers_increase_per_device_in_send_order() -> None:
    per_device: dict[int, list[int]] = {}
    for r in _receipts(_run(count=2000)):
        per_device.setdefault(r.vendor_fiscal_module, []).append(r.transaction_id)
    assert len(per_device) > 20
    for tids in per_device.values():
        assert tids == sorted(tids) and len(set(tids)) == len(tids)


def test_keys_keep_a_device_in_one_partition() -> None:
    for m in _run(count=200).messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        assert m.key == f"{r.operation_id}:{r.vendor_fiscal_module}".encode()


def test_resends_are_identical_bytes_counted_in_the_ledger() -> None:
    result = _run(count=1000, resend_rate=0.05)
    resends = result.summary["faults"]["resend"]
    assert 20 < resends < 80
    assert len(result.messages) == 1000 + resends
    copies = Counter(m.value for m in result.messages)
    assert sum(n - 1 for n in copies.values()) == resends
    assert sum(r["copies"] - 1 for r in result.receipts) == resends
    assert len({r.natural_key for r in _receipts(result)}) == 1000


def test_malformed_messages_fail_validation_with_the_recorded_reason() -> None:
    result = _run(count=1000, malformed_rate=0.05)
    bad = [m for m in result.messages if m.kind.startswith("malformed:")]
    expected = [f["expected_reason"] for f in result.faults if f["kind"] == "malformed"]
    assert len(bad) == result.summary["faults"]["malformed"] == len(expected) > 20
    got = [parse_message(m.value) for m in bad]
    assert all(isinstance(g, Invalid) for g in got)
    assert Counter(g.reason for g in got) == Counter(expected)  # type: ignore[union-attr]
    assert set(result.summary["malformed_kinds"]) == {
        "broken_json", "missing_field", "wrong_type", "negative_price", "oversized_list",
    }  # fmt: skip
    assert len(result.messages) == 1000 + len(bad)


def test_late_messages_carry_their_delay_in_the_kafka_timestamp() -> None:
    result = _run(count=1000, late_rate=0.1, late_max_delay_s=7200)
    late = {
        (f["operation_id"], f["vendor_fiscal_module"], f["transaction_id"]): f["delay_s"]
        for f in result.faults
        if f["kind"] == "late"
    }
    assert 50 < len(late) < 150
    for m in result.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        delay = m.timestamp_ms / 1000 - r.happened_at.timestamp()
        if r.natural_key in late:
            assert delay == late[r.natural_key]
            assert 15 * 60 < delay <= 7200
        else:
            assert delay == 0
    assert {r["late"] for r in result.receipts} == {True, False}
    assert result.summary["late_receipts"] == len(late)
    # Sent in timestamp order, so late receipts arrive out of event-time order.
    stamps = [m.timestamp_ms for m in result.messages]
    assert stamps == sorted(stamps)


def test_bursts_put_several_receipts_of_one_store_in_one_second() -> None:
    result = _run(count=1000, burst_rate=0.1)
    same_second = Counter((r.operation_id, r.happened_at) for r in _receipts(result))
    assert max(same_second.values()) >= 2
    assert result.summary["faults"]["burst"] > 0
    assert len(result.receipts) == 1000


def test_out_of_order_delivers_a_receipt_after_its_successor() -> None:
    result = _run(count=1000, out_of_order_rate=0.05)
    swaps = result.summary["faults"]["out_of_order"]
    assert swaps > 0
    inversions = 0
    last: dict[int, int] = {}
    for r in _receipts(result):
        if r.transaction_id < last.get(r.vendor_fiscal_module, 0):
            inversions += 1
        last[r.vendor_fiscal_module] = max(r.transaction_id, last.get(r.vendor_fiscal_module, 0))
    assert inversions >= 1


def test_clock_skew_shifts_happened_at_per_device() -> None:
    plain, skewed = _run(count=300), _run(count=300, clock_skew_max_s=120)
    assert skewed.summary["skewed_devices"] > 0
    offsets = {
        r.vendor_fiscal_module: m.timestamp_ms / 1000 - r.happened_at.timestamp()
        for m in skewed.messages
        for r in [parse_message(m.value)]
        if isinstance(r, Receipt)
    }
    assert any(o != 0 for o in offsets.values())
    assert all(abs(o) <= 120 for o in offsets.values())
    assert plain.summary["skewed_devices"] == 0


def test_encode_prints_local_time_with_offset() -> None:
    r = Receipt(
        datetime(2026, 3, 2, 22, 30, tzinfo=UTC), 1, 5, 9, (LineItem("Tea", Decimal("1.50"), 2),)
    )
    assert encode(r, utc_offset_h=2) == (
        b'{"happened_at":"2026-03-03T00:30:00+02:00","operation_id":1,"transaction_id":5,'
        b'"vendor_fiscal_module":9,"transactions":[{"title":"Tea","price":"1.50","amount":2}]}'
    )


def test_ledger_expected_aggregates_of_a_hand_made_example(tmp_path: Path) -> None:
    lines = [
        {"operation_id": 1, "vendor_fiscal_module": 2, "transaction_id": 1,
         "window_start": "2026-03-02T08:00:00+00:00", "item_quantity": 2, "revenue": "3.80",
         "late": False},
        {"operation_id": 1, "vendor_fiscal_module": 2, "transaction_id": 2,
         "window_start": "2026-03-02T08:00:00+00:00", "item_quantity": -1, "revenue": "-1.90",
         "late": True},
        {"operation_id": 1, "vendor_fiscal_module": 3, "transaction_id": 1,
         "window_start": "2026-03-02T08:15:00+00:00", "item_quantity": 1, "revenue": "0.10",
         "late": False},
    ]  # fmt: skip
    ledger.write(tmp_path, lines, [], {"messages": 3})
    w = lambda m: datetime(2026, 3, 2, 8, m, tzinfo=UTC)
    assert ledger.expected_aggregates(tmp_path) == {
        (1, w(0)): (2, 1, Decimal("1.90"), 1),
        (1, w(15)): (1, 1, Decimal("0.10"), 0),
    }
    assert ledger.load_summary(tmp_path) == {"messages": 3}


def test_the_fields_original_key_loses_same_second_receipts() -> None:
    """((year_day, operation_id), happened_at) overwrote receipts; the natural key does not."""
    result = _run(count=1000, burst_rate=0.2)
    receipts = _receipts(result)
    old_key = {
        ((r.happened_at.timetuple().tm_yday, r.operation_id), r.happened_at): r for r in receipts
    }
    natural = {r.natural_key: r for r in receipts}
    assert len(natural) == 1000
    assert len(old_key) < 1000
