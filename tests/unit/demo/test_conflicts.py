"""Conflicting copies: after their original, same key, other content, counted."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pos_lambda.producer.simulation import FaultConfig, OutgoingMessage, SimulationConfig, simulate
from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda_dev.demo.conflicts import add_conflicts, changed, summary_with


def _msg(key: bytes, tid: int, ts: int, amount: int = 2, kind: str = "receipt") -> OutgoingMessage:
    doc = {
        "happened_at": "2026-03-02T08:00:00+00:00",
        "operation_id": 101,
        "transaction_id": tid,
        "vendor_fiscal_module": 1001,
        "transactions": [{"title": "Espresso", "price": "1.90", "amount": amount}],
    }
    return OutgoingMessage(key, json.dumps(doc, separators=(",", ":")).encode(), ts, kind)


def test_changed_moves_the_first_quantity_by_one_and_never_to_zero() -> None:
    assert json.loads(changed(_msg(b"k", 1, 0, amount=2).value))["transactions"][0]["amount"] == 3
    assert json.loads(changed(_msg(b"k", 1, 0, amount=-1).value))["transactions"][0]["amount"] == 2


def test_every_receipt_gets_a_copy_at_rate_one_placed_after_its_original() -> None:
    msgs = [_msg(b"a", 1, 1000), _msg(b"b", 2, 1000), _msg(b"a", 3, 90_000)]
    out = add_conflicts(msgs, 1.0, seed=3)
    kinds = [(m.kind, json.loads(m.value)["transaction_id"]) for m in out.messages]
    # Copies come 1-60 s after their original: after both 1000 ms originals, and the
    # one of receipt 3 after receipt 3.
    assert kinds[:2] == [("receipt", 1), ("receipt", 2)]
    assert kinds.index(("conflict", 1)) > 0 and kinds.index(("conflict", 2)) > 1
    assert kinds.index(("conflict", 3)) > kinds.index(("receipt", 3))
    assert [m.timestamp_ms for m in out.messages] == sorted(m.timestamp_ms for m in out.messages)
    assert len(out.faults) == 3
    first = out.faults[0]
    got = (first["kind"], first["transaction_id"], first["winner_revenue"], first["copy_revenue"])
    assert got == ("conflict", 1, "3.80", "5.70")
    copies = {m.key for m in out.messages if m.kind == "conflict"}
    assert copies == {b"a", b"b"}  # same key as the original: same partition


def test_rate_zero_changes_nothing_and_other_kinds_never_get_copies() -> None:
    msgs = [_msg(b"a", 1, 0), _msg(b"a", 1, 5, kind="resend"), _msg(b"a", 9, 7, kind="malformed:x")]
    assert add_conflicts(msgs, 0.0, seed=1).messages == msgs
    out = add_conflicts(msgs, 1.0, seed=1)
    assert [m.kind for m in out.messages].count("conflict") == 1


def test_copies_are_valid_receipts_with_other_content_and_the_count_is_seeded() -> None:
    result = simulate(
        SimulationConfig(
            count=2000,
            seed=5,
            start=datetime(2026, 3, 2, 8, tzinfo=UTC),
            faults=FaultConfig(resend_rate=0.01, malformed_rate=0.01),
        )
    )
    a = add_conflicts(result.messages, 0.01, seed=5)
    assert a == add_conflicts(result.messages, 0.01, seed=5)
    assert 5 <= len(a.faults) <= 40
    originals = {
        (r.operation_id, r.vendor_fiscal_module, r.transaction_id): r
        for m in result.messages
        if m.kind == "receipt" and isinstance(r := parse_message(m.value), Receipt)
    }
    for m in a.messages:
        if m.kind == "conflict":
            copy = parse_message(m.value)
            assert isinstance(copy, Receipt)
            original = originals[copy.natural_key]
            assert copy.line_items != original.line_items
    summary = summary_with(result.summary, a.faults)
    assert summary["messages"] == len(a.messages)
    assert summary["faults"]["conflict"] == len(a.faults)
    assert summary["faults"]["resend"] == result.summary["faults"]["resend"]


def test_a_rate_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        add_conflicts([], 1.5, seed=1)
