"""Conflicting copies: the same natural key sent again with other line items.

The simulator injects resends (same bytes) but no conflicts (same key, other content:
a device that re-rang a receipt). `add_conflicts` is pure: it picks receipts with a
seeded generator and puts a changed copy of each after its original, in send order and
with the same Kafka key (so the same partition). The original is therefore the winner
(the first copy in Kafka's order), the ledger's expected values stay right, and the
copy must show up as a counted conflict, never in a view.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pos_lambda.producer.simulation import OutgoingMessage

MIN_AFTER_MS, MAX_AFTER_MS = 1_000, 60_000


@dataclass(frozen=True)
class WithConflicts:
    messages: list[OutgoingMessage]  # send order, copies after their originals
    faults: list[dict[str, Any]]  # one ledger fault line per conflicting copy


def changed(value: bytes) -> bytes:
    """The receipt with its first line's quantity moved by one (never to zero)."""
    doc = json.loads(value)
    line = doc["transactions"][0]
    amount = int(line["amount"])
    line["amount"] = amount + 1 if amount + 1 != 0 else 2
    return json.dumps(doc, separators=(",", ":")).encode()


def _revenue(value: bytes) -> str:
    doc = json.loads(value)
    total = sum(
        (Decimal(i["price"]) * int(i["amount"]) for i in doc["transactions"]), Decimal("0.00")
    )
    return str(total)


def add_conflicts(messages: list[OutgoingMessage], rate: float, seed: int) -> WithConflicts:
    """Add a conflicting copy after a `rate` fraction of the original receipts."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"conflict rate must be between 0 and 1, got {rate}")
    rng = random.Random(seed)
    # (timestamp, position, tiebreak, message): a copy sorts after its original even
    # when their timestamps are equal, and the others keep their relative order.
    entries: list[tuple[int, int, int, OutgoingMessage]] = []
    faults: list[dict[str, Any]] = []
    for position, msg in enumerate(messages):
        entries.append((msg.timestamp_ms, position, 0, msg))
        if msg.kind != "receipt" or not rate or rng.random() >= rate:
            continue
        after_ms = rng.randint(MIN_AFTER_MS, MAX_AFTER_MS)
        value = changed(msg.value)
        at_ms = msg.timestamp_ms + after_ms
        entries.append((at_ms, position, 1, OutgoingMessage(msg.key, value, at_ms, "conflict")))
        doc = json.loads(msg.value)
        faults.append(
            {
                "kind": "conflict",
                "operation_id": doc["operation_id"],
                "vendor_fiscal_module": doc["vendor_fiscal_module"],
                "transaction_id": doc["transaction_id"],
                "after_ms": after_ms,
                "winner_revenue": _revenue(msg.value),
                "copy_revenue": _revenue(value),
                "detail": f"a copy with other line items sent {after_ms} ms later",
            }
        )
    entries.sort(key=lambda e: (e[0], e[1], e[2]))
    return WithConflicts([e[3] for e in entries], faults)


def summary_with(summary: dict[str, Any], conflict_faults: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulator's summary with the conflicting copies counted in."""
    faults = {**summary.get("faults", {}), "conflict": len(conflict_faults)}
    return {**summary, "messages": summary["messages"] + len(conflict_faults), "faults": faults}
