"""Counting lost, duplicated and wrong rows: literal expected and observed rows."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

from pos_lambda.audit import compare
from pos_lambda.audit.expectations import MalformedFact
from pos_lambda.schemas.aggregate import Aggregate

W = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def counts(t: compare.Tally) -> tuple[int, int, int, int, int]:
    return (t.expected, t.observed, t.lost, t.duplicated, t.wrong)


def test_keyed_rows_lost_duplicated_wrong_and_unknown() -> None:
    expected = {(1, 1, 1): "a", (1, 1, 2): "b", (1, 1, 3): "c"}
    observed = [((1, 1, 1), "a"), ((1, 1, 1), "a"), ((1, 1, 2), "B"), ((9, 9, 9), "z")]
    t = compare.keyed_rows(expected, observed)
    assert counts(t) == (3, 4, 1, 1, 2)
    assert [(e["kind"], e["key"]) for e in t.examples] == [
        ("duplicated", [1, 1, 1]),
        ("wrong", [1, 1, 2]),
        ("wrong", [9, 9, 9]),
        ("lost", [1, 1, 3]),
    ]
    assert t.examples[1] == {"kind": "wrong", "key": [1, 1, 2], "expected": "b", "observed": "B"}
    assert counts(compare.keyed_rows(expected, expected.items())) == (3, 3, 0, 0, 0)


def test_aggregate_rows_tell_lost_from_double_counted_from_wrong() -> None:
    a = lambda n, rev, late=0: Aggregate(n, n, Decimal(rev), late)
    expected = {
        (1, W): a(2, "3.00"),  # missing
        (2, W): a(3, "9.00"),  # one receipt short: lost
        (3, W): a(1, "1.00"),  # counted twice: duplicated
        (4, W): a(1, "1.00"),  # right count, wrong revenue
        (5, W): a(1, "1.00"),  # right
    }
    observed = [
        ((2, W), a(2, "6.00")),
        ((3, W), a(2, "2.00")),
        ((4, W), a(1, "1.01")),
        ((5, W), a(1, "1.0")),  # Decimal equality: 1.0 == 1.00
        ((6, W), a(1, "5.00")),  # a window the ledger does not imply
        ((7, W), a(0, "0.00")),  # an empty window (serving fills them in): no row
    ]
    t = compare.aggregate_rows(expected, observed)
    assert counts(t) == (5, 5, 2, 1, 2)
    assert {(e["kind"], e["key"][0]) for e in t.examples} == {
        ("lost", 1), ("lost", 2), ("duplicated", 3), ("wrong", 4), ("wrong", 6),
    }  # fmt: skip
    assert len(t.examples) == compare.MAX_EXAMPLES


def test_aggregate_stored_twice_is_duplicated() -> None:
    row = Aggregate(1, 1, Decimal("1.00"), 0)
    t = compare.aggregate_rows({(1, W): row}, [((1, W), row), ((1, W), row)])
    assert counts(t) == (1, 2, 0, 1, 0)


def test_identities_as_multisets() -> None:
    expected = Counter({("high_value", 1, 1, 1): 1, ("device_silent", 1, 1, 2): 1})
    observed = [
        ("high_value", 1, 1, 1),
        ("high_value", 1, 1, 1),  # the same alert twice
        ("conflict", 1, 1, 9),  # not implied ...
        ("conflict", 1, 1, 9),  # ... and twice
    ]
    t = compare.identities(expected, observed)
    assert counts(t) == (2, 4, 1, 2, 1)
    assert counts(compare.identities(expected, list(expected))) == (2, 2, 0, 0, 0)


def test_dead_letters_by_fingerprint() -> None:
    expected = [
        MalformedFact("broken_json", "invalid_json", "s1"),
        MalformedFact("wrong_type", "wrong_type:operation_id", "s2"),
        MalformedFact("oversized_list", "too_many_items", "s3"),
        MalformedFact("negative_price", "negative_price", "s4"),
    ]
    observed = [
        ("s1", "invalid_json"),
        ("s1", "invalid_json"),  # dead-lettered twice
        ("s2", "wrong_type:transactions.0.price"),  # the right code, the wrong field
        ("s4", "negative_price"),
        ("xx", "invalid_json"),  # a message nobody injected
    ]  # s3 lost
    t = compare.dead_letters(expected, observed)
    assert counts(t) == (4, 5, 1, 1, 2)
    assert {(e["kind"], e["key"]) for e in t.examples} == {
        ("duplicated", "s1"), ("wrong", "s2"), ("wrong", "xx"), ("lost", "s3"),
    }  # fmt: skip


def test_dead_letters_of_identical_injected_bytes_are_a_multiset() -> None:
    # Truncation can cut two different receipts to the same prefix: two injected
    # messages with one fingerprint, each owed its own dead letter.
    twin = MalformedFact("broken_json", "invalid_json", "same")
    expected = [twin, twin, MalformedFact("broken_json", "invalid_json", "s1")]
    both = [("same", "invalid_json"), ("same", "invalid_json"), ("s1", "invalid_json")]
    assert counts(compare.dead_letters(expected, both)) == (3, 3, 0, 0, 0)
    one = [("same", "invalid_json"), ("s1", "invalid_json")]
    assert counts(compare.dead_letters(expected, one)) == (3, 2, 1, 0, 0)
    three = [*both, ("same", "invalid_json")]
    assert counts(compare.dead_letters(expected, three)) == (3, 4, 0, 1, 0)


def test_dead_letters_of_an_older_ledger_by_reason_counts() -> None:
    expected = [
        MalformedFact("broken_json", None, None),
        MalformedFact("broken_json", None, None),
        MalformedFact("oversized_list", None, None),
    ]
    observed = [("h1", "invalid_json"), ("h2", "negative_price")]
    t = compare.dead_letters(expected, observed)
    # one invalid_json and the too_many_items missing; a negative_price nobody injected
    assert counts(t) == (3, 2, 2, 0, 1)
