"""The ground-truth ledger: what the views must contain, written beside the stream.

A directory of plain JSON files that any tool can read:
- receipts.jsonl: one line per unique receipt: natural key, happened_at and
  window_start (UTC ISO-8601), item_quantity, revenue (decimal string),
  line_count, returned_value (decimal string; absent in older ledgers),
  first_sent_at, late, copies (1 + resends); with `--store-hours`, local_day: the
  receipt's store-local business day (YYYY-MM-DD, by the store's IANA zone).
- faults.jsonl: one line per injected fault (kind and details; a malformed message's
  line carries its expected_reason and value_sha256, the SHA-256 of its bytes, absent
  in older ledgers).
- summary.json: counts per fault kind, messages, unique receipts, seed, start, topic.

Expected values are computed by the producer with Python Decimal, independently of
any Spark code, so comparing a view with `expected_aggregates` is a real check:

    from pos_lambda.producer import ledger
    expected = ledger.expected_aggregates(".state/demo-ledger")
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pos_lambda.schemas.aggregate import NO_RECEIPTS, Aggregate
from pos_lambda.schemas.contract import NaturalKey

PathLike = str | Path


def write(
    path: PathLike,
    receipts: Iterable[dict[str, Any]],
    faults: Iterable[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name, lines in (("receipts.jsonl", receipts), ("faults.jsonl", faults)):
        with open(path / name, "w") as out:
            for line in lines:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
    write_summary(path, summary)


def write_summary(path: PathLike, summary: dict[str, Any]) -> None:
    # Write-then-rename: a reader never sees half a summary.
    tmp = Path(path) / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(Path(path) / "summary.json")


def load_summary(path: PathLike) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((Path(path) / "summary.json").read_text())
    return summary


def load_receipts(path: PathLike) -> dict[NaturalKey, dict[str, Any]]:
    """Ledger lines of the unique receipts by natural key."""
    out = {}
    with open(Path(path) / "receipts.jsonl") as lines:
        for line in lines:
            r = json.loads(line)
            out[(r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"])] = r
    return out


def load_faults(path: PathLike) -> list[dict[str, Any]]:
    with open(Path(path) / "faults.jsonl") as lines:
        return [json.loads(line) for line in lines]


def expected_aggregates(path: PathLike) -> dict[tuple[int, datetime], Aggregate]:
    """(operation_id, window_start UTC) -> Aggregate(receipt_count, item_quantity, revenue,
    late_count), summed over the unique receipts (resends counted once)."""
    acc: dict[tuple[int, datetime], Aggregate] = {}
    for r in load_receipts(path).values():
        key = (r["operation_id"], datetime.fromisoformat(r["window_start"]))
        acc[key] = _counted(acc.get(key, NO_RECEIPTS), r)
    return acc


def expected_local_days(path: PathLike) -> dict[tuple[int, date], Aggregate]:
    """(operation_id, store-local day) -> Aggregate, summed over the unique receipts.

    Needs a ledger written with store hours (each line's `local_day`, computed by the
    producer from happened_at and the store's zone): the truth local-day totals built
    from UTC windows are compared with.
    """
    acc: dict[tuple[int, date], Aggregate] = {}
    for r in load_receipts(path).values():
        if "local_day" not in r:
            raise ValueError(f"{path}: receipts carry no local_day (simulate with --store-hours)")
        key = (r["operation_id"], date.fromisoformat(r["local_day"]))
        acc[key] = _counted(acc.get(key, NO_RECEIPTS), r)
    return acc


def _counted(aggregate: Aggregate, line: dict[str, Any]) -> Aggregate:
    return aggregate.plus_receipt(
        int(line["item_quantity"]), Decimal(line["revenue"]), line["late"]
    )
