"""The ground-truth ledger: what the views must contain, written beside the stream.

A directory of plain JSON files that any tool can read:
- receipts.jsonl: one line per unique receipt: natural key, happened_at and
  window_start (UTC ISO-8601), item_quantity, revenue (decimal string),
  line_count, first_sent_at, late, copies (1 + resends).
- faults.jsonl: one line per injected fault (kind and details).
- summary.json: counts per fault kind, messages, unique receipts, seed, start, topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

NaturalKey = tuple[int, int, int]


def write(
    path: Path,
    receipts: Iterable[dict[str, Any]],
    faults: Iterable[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, lines in (("receipts.jsonl", receipts), ("faults.jsonl", faults)):
        with open(path / name, "w") as out:
            for line in lines:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
    (path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def load_summary(path: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((path / "summary.json").read_text())
    return summary


def load_receipts(path: Path) -> dict[NaturalKey, dict[str, Any]]:
    out = {}
    with open(path / "receipts.jsonl") as lines:
        for line in lines:
            r = json.loads(line)
            out[(r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])] = r
    return out


def load_faults(path: Path) -> list[dict[str, Any]]:
    with open(path / "faults.jsonl") as lines:
        return [json.loads(line) for line in lines]


def expected_aggregates(path: Path) -> dict[tuple[int, datetime], tuple[int, int, Decimal, int]]:
    """(operation_id, window_start UTC) -> (receipt_count, item_quantity, revenue, late_count)."""
    acc: dict[tuple[int, datetime], list[Any]] = {}
    for r in load_receipts(path).values():
        key = (r["operation_id"], datetime.fromisoformat(r["window_start"]))
        a = acc.setdefault(key, [0, 0, Decimal("0.00"), 0])
        a[0] += 1
        a[1] += int(r["item_quantity"])
        a[2] += Decimal(r["revenue"])
        a[3] += 1 if r["late"] else 0
    return {k: (a[0], a[1], a[2], a[3]) for k, a in acc.items()}
