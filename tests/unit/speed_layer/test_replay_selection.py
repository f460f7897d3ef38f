"""`pos-speed replay-dead-letters`' selection (pure): which dead letters, whose bytes."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from pos_lambda.speed_layer.dead_letters import DeadLetter
from pos_lambda.speed_layer.replay import (
    Resend,
    SelectionError,
    matches,
    parse_reason,
    parse_since,
    resolve,
    select,
)

NOW = datetime(2026, 3, 3, 12, tzinfo=UTC)
BIG = b'{"happened_at": "' + b"x" * 5000 + b'"}'


def _sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def _dead(
    offset: int, value: bytes | None, reason: str, at: datetime, prefix: int | None = None
) -> DeadLetter:
    stored = value if value is None or prefix is None else value[:prefix]
    length = None if value is None else len(value)
    sha = None if value is None else _sha(value)
    return DeadLetter("t", 0, offset, stored, length, sha, reason, at, b"1:2")


def test_a_reason_is_a_known_code_with_or_without_its_field_path() -> None:
    assert parse_reason("bad_price") == "bad_price"
    narrowed = "missing_field:transactions.0.price"
    assert parse_reason(narrowed) == narrowed
    with pytest.raises(SelectionError) as bad:
        parse_reason("bad_prices")
    text = str(bad.value)
    assert text.startswith("--reason: 'bad_prices' is not a dead-letter reason; valid reasons")
    described = "a price that is not a decimal with at most 2 places"
    assert f"\n  {'bad_price':<24} {described}\n" in text
    assert text.count("\n  ") == 19  # every code of the contract, one a line


def test_since_is_an_instant_with_an_offset_or_a_duration_back_from_now() -> None:
    assert parse_since("2026-03-02T08:00Z", NOW) == datetime(2026, 3, 2, 8, tzinfo=UTC)
    assert parse_since("2026-03-02T09:00+01:00", NOW) == datetime(2026, 3, 2, 8, tzinfo=UTC)
    assert parse_since("90m", NOW) == datetime(2026, 3, 3, 10, 30, tzinfo=UTC)
    assert parse_since("24h", NOW) == datetime(2026, 3, 2, 12, tzinfo=UTC)
    assert parse_since("7d", NOW) == datetime(2026, 2, 24, 12, tzinfo=UTC)
    for bad in ("yesterday", "2026-03-02T08:00", "24", "-1h"):
        with pytest.raises(SelectionError, match="neither an ISO-8601 instant with an offset"):
            parse_since(bad, NOW)
    with pytest.raises(SelectionError, match="is in the future"):
        parse_since("2026-03-04T00:00Z", NOW)


def test_a_reason_names_itself_its_code_and_leading_parts_of_its_field_path() -> None:
    stored = "missing_field:transactions.0.price"
    assert [
        matches(stored, w)
        for w in (
            "missing_field",
            "missing_field:transactions",
            "missing_field:transactions.0.price",
            "missing_field:transactions.0.pr",
            "missing",
            "wrong_type",
        )
    ] == [True, True, True, False, False, False]


def test_the_selection_keeps_the_reason_since_the_instant_one_per_value_in_arrival_order() -> None:
    t8, t9, t10 = (datetime(2026, 3, 2, h, tzinfo=UTC) for h in (8, 9, 10))
    a, b = b'{"a": 1}', b'{"b": 2}'
    dead = [
        _dead(5, b, "bad_price", t10),
        _dead(1, a, "bad_price", t9),
        _dead(2, a, "bad_price", t10),  # the same record, dead again after a replay
        _dead(3, a, "invalid_json", t9),  # another reason
        _dead(4, b'{"c": 3}', "bad_price", t8),  # before --since
        _dead(6, None, "bad_price", t10),  # no value: nothing to send
    ]
    chosen = select(dead, "bad_price", t9)
    assert [d.offset for d in chosen.chosen] == [1, 5]
    assert (chosen.same_value, chosen.no_value) == (1, 1)
    assert select(dead, "bad_price", datetime(2026, 3, 3, tzinfo=UTC)).chosen == []


def test_whole_values_come_from_the_row_or_the_master_dataset_checked_by_their_hash() -> None:
    t9 = datetime(2026, 3, 2, 9, tzinfo=UTC)
    whole = _dead(1, b'{"a": 1}', "bad_price", t9)
    prefixed = _dead(2, BIG, "too_many_items", t9, prefix=4096)
    gone = _dead(3, BIG + b" ", "too_many_items", t9, prefix=4096)
    resends, skipped = resolve([whole, prefixed, gone], {("t", 0, 2): BIG})
    assert resends == [
        Resend(whole, b'{"a": 1}', "dead letter"),
        Resend(prefixed, BIG, "master dataset"),
    ]
    assert skipped == ["t/0@3: not in the master dataset (VACUUMed, or another table)"]
    _, altered = resolve([prefixed], {("t", 0, 2): BIG[:-1]})
    assert altered == ["t/0@2: the master dataset's value does not match its SHA-256"]
