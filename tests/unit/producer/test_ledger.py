"""The ground-truth ledger: a hand-computed example, and a simulated run read back."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from pos_lambda.producer import ledger
from pos_lambda.producer.cli import main
from pos_lambda.schemas.contract import Receipt, parse_message


def test_expected_aggregates_of_a_hand_made_example(tmp_path: Path) -> None:
    lines = [
        {"operation_id": 1, "vendor_fiscal_module": 2, "transaction_id": 1,
         "window_start": "2026-03-02T08:00:00+00:00", "item_quantity": 2, "revenue": "3.80",
         "late": False, "copies": 2},
        {"operation_id": 1, "vendor_fiscal_module": 2, "transaction_id": 2,
         "window_start": "2026-03-02T08:00:00+00:00", "item_quantity": -1, "revenue": "-1.90",
         "late": True, "copies": 1},
        {"operation_id": 1, "vendor_fiscal_module": 3, "transaction_id": 1,
         "window_start": "2026-03-02T08:15:00+00:00", "item_quantity": 1, "revenue": "0.10",
         "late": False, "copies": 1},
        {"operation_id": 2, "vendor_fiscal_module": 7, "transaction_id": 9,
         "window_start": "2026-03-02T08:00:00+00:00", "item_quantity": 3, "revenue": "4.47",
         "late": False, "copies": 1},
    ]  # fmt: skip
    ledger.write(tmp_path, lines, [{"kind": "resend"}], {"messages": 5})
    w = lambda m: datetime(2026, 3, 2, 8, m, tzinfo=UTC)
    got = ledger.expected_aggregates(tmp_path)
    assert got == {
        # a resent receipt counts once
        (1, w(0)): (2, 1, Decimal("1.90"), 1),
        (1, w(15)): (1, 1, Decimal("0.10"), 0),
        (2, w(0)): (1, 3, Decimal("4.47"), 0),
    }
    assert got[(1, w(0))].late_count == 1
    assert ledger.load_summary(tmp_path) == {"messages": 5}
    assert ledger.load_faults(tmp_path) == [{"kind": "resend"}]
    assert set(ledger.load_receipts(str(tmp_path))) == {(1, 2, 1), (1, 2, 2), (1, 3, 1), (2, 7, 9)}


def test_a_simulated_ledger_matches_its_own_messages(tmp_path: Path) -> None:
    """Totals from the ledger equal totals recomputed from the emitted bytes."""
    out, led = tmp_path / "m.jsonl", tmp_path / "ledger"
    assert main(["simulate", "--count", "800", "--seed", "4", "--ledger", str(led),
                 "--output", str(out), "--start", "2026-03-02T07:50:00+00:00",
                 "--resend-rate", "0.05", "--malformed-rate", "0.05"]) == 0  # fmt: skip
    summary = ledger.load_summary(led)
    assert summary["unique_receipts"] == 800 and summary["output"] == str(out)
    first: dict[tuple[int, int, int], Receipt] = {}
    for line in out.read_bytes().splitlines():
        r = parse_message(line)
        if isinstance(r, Receipt):
            first.setdefault(r.natural_key, r)
    assert len(first) == 800
    recomputed: dict[tuple[int, datetime], list[object]] = defaultdict(lambda: [0, 0, Decimal("0")])
    for r in first.values():
        epoch = int(r.happened_at.timestamp())
        key = (r.operation_id, datetime.fromtimestamp(epoch - epoch % 900, tz=UTC))
        acc = recomputed[key]
        acc[0] += 1  # type: ignore[operator]
        acc[1] += r.item_quantity  # type: ignore[operator]
        acc[2] += r.revenue  # type: ignore[operator]
    expected = ledger.expected_aggregates(led)
    assert {k: (a.receipt_count, a.item_quantity, a.revenue) for k, a in expected.items()} == {
        k: tuple(v) for k, v in recomputed.items()
    }
    assert len({ws for _, ws in expected}) >= 2  # the run spans windows
