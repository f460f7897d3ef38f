"""The dead-letter export for `pos-producer replay` (pure): whole values from the row or
the master dataset, checked against the stored hash."""

from __future__ import annotations

import hashlib

from pos_lambda.speed_layer.dead_letters import DeadLetter, export, to_fetch

BIG = b'{"happened_at": "' + b"x" * 5000 + b'"}'


def _sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


OLD_ROW = DeadLetter("t", 0, 1, b'{"a": 1}', None, None, "schema_violation:x")
SHORT = DeadLetter("t", 0, 2, b'{"b": 2}', 8, _sha(b'{"b": 2}'), "schema_violation:y")
PREFIX = DeadLetter("t", 1, 7, BIG[:4096], len(BIG), _sha(BIG), "schema_violation:z")


def test_only_rows_holding_a_prefix_are_read_from_the_master_dataset() -> None:
    assert to_fetch([OLD_ROW, SHORT, PREFIX]) == [("t", 1, 7)]


def test_whole_values_come_from_the_row_or_the_archive_in_order() -> None:
    lines, skipped = export([PREFIX, OLD_ROW, SHORT], {("t", 1, 7): BIG})
    assert (lines, skipped) == ([BIG, b'{"a": 1}', b'{"b": 2}'], [])


def test_a_missing_or_altered_archive_value_and_a_line_break_are_skipped_and_named() -> None:
    broken = DeadLetter("t", 2, 3, b"a\nb", 3, _sha(b"a\nb"), "invalid_json")
    empty = DeadLetter("t", 2, 4, None, None, None, "empty_value")
    lines, skipped = export([PREFIX, broken, empty], {})
    assert lines == []
    assert skipped == [
        "t/1@7: not in the master dataset",
        "t/2@3: a line break in the value (one message per line)",
        "t/2@4: no value",
    ]
    _, altered = export([PREFIX], {("t", 1, 7): BIG + b" "})
    assert altered == ["t/1@7: the archived value does not match its SHA-256"]
