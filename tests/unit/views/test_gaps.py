"""Gaps in a device's receipt numbers (views/gaps.py): literal days, then properties
that hold for any arrival order (issue 77's shared view logic)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pos_lambda.views.gaps import (
    DeviceDay,
    Run,
    device_day,
    holes,
    parse_range,
    range_text,
    ranges,
    runs,
)

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def day(*numbers: int) -> list[tuple[datetime, int]]:
    """Receipts issued in this order, a minute apart."""
    return [(T0 + timedelta(minutes=i), n) for i, n in enumerate(numbers)]


def test_ranges_and_holes() -> None:
    assert ranges([5, 3, 4, 9, 9, 11, 10, 1]) == ((1, 1), (3, 5), (9, 11))
    assert holes(((1, 1), (3, 5), (9, 11))) == ((2, 2), (6, 8))
    assert ranges([]) == () and holes(()) == ()


def test_a_day_without_holes() -> None:
    assert runs(day(1041, 1042, 1043), max_jump=100) == [Run(1041, 1043, 3, ())]


def test_two_receipts_lost_at_the_till() -> None:
    (run,) = runs(day(3309, 3310, 3313, 3314), max_jump=100)
    assert run == Run(3309, 3314, 4, ((3311, 3312),))
    assert run.missing_count == 2


def test_a_late_receipt_fills_its_gap() -> None:
    before = runs(day(1, 2, 4), max_jump=100)
    late = day(1, 2, 3, 4)  # number 3 issued third, arrived after the others
    assert before == [Run(1, 4, 3, ((3, 3),))]
    assert runs(late, max_jump=100) == [Run(1, 4, 4, ())]


def test_a_restarted_device_is_two_runs_not_a_gap() -> None:
    assert runs(day(5012, 5013, 1, 2, 3), max_jump=100) == [
        Run(5012, 5013, 2, ()),
        Run(1, 3, 3, ()),
    ]


def test_a_jump_beyond_the_setting_is_a_renumbering_within_it_a_gap() -> None:
    numbers = day(10, 11, 500, 501)
    assert runs(numbers, max_jump=100) == [Run(10, 11, 2, ()), Run(500, 501, 2, ())]
    assert runs(numbers, max_jump=1000) == [Run(10, 501, 4, ((12, 499),))]


def test_copies_change_nothing() -> None:
    once = day(1, 2, 4)
    assert runs(once + once[:2], max_jump=100) == runs(once, max_jump=100)


def test_max_jump_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_jump must be at least 1"):
        runs(day(1), max_jump=0)


# A device's day: consecutive numbers from a start, some lost at the till.
days = st.tuples(
    st.integers(1, 10_000), st.integers(1, 60), st.sets(st.integers(0, 59)), st.randoms()
)


@given(days)
def test_any_arrival_order_gives_the_same_runs_and_holes_are_what_was_lost(
    drawn: tuple[int, int, set[int], random.Random],
) -> None:
    start, count, lost_at, rng = drawn
    issued = [start + i for i in range(count)]
    lost = {issued[i] for i in lost_at if 0 < i < count - 1}  # not the first nor the last
    held = [(T0 + timedelta(minutes=n), n) for n in issued if n not in lost]
    shuffled = held[:]
    rng.shuffle(shuffled)
    (run,) = runs(shuffled, max_jump=count)
    assert runs(held, max_jump=count) == [run]
    assert (run.first, run.last, run.count) == (start, start + count - 1, count - len(lost))
    assert {n for lo, hi in run.missing for n in range(lo, hi + 1)} == lost


def test_a_device_day_sums_its_runs() -> None:
    # Restarted at 1 after 5013; 5014 missing before the restart would be a gap only if
    # seen later, so the gaps are those inside each run.
    got = device_day(day(5010, 5012, 5013, 1, 2, 4), max_jump=100)
    assert got == DeviceDay(
        first=5010, last=4, count=6, missing=((5011, 5011), (3, 3)), restarts=(1,)
    )
    assert got.missing_count == 2
    assert [range_text(m) for m in got.missing] == ["5011", "3"]


def test_a_device_day_needs_a_receipt() -> None:
    with pytest.raises(ValueError, match="at least one receipt"):
        device_day([], max_jump=100)


def test_range_text_round_trips() -> None:
    assert range_text((3311, 3312)) == "3311-3312" and range_text((7, 7)) == "7"
    assert parse_range("3311-3312") == (3311, 3312) and parse_range("7") == (7, 7)
