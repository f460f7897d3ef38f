"""The batch layer's commit plan (src/pos_lambda/batch_layer/plan.py), pure: which days
move, with which version and coverage, the horizon, the folded mark, and what is refused.
Expected values are literal. The races of issue 62 run against the in-memory pointer in
tests/unit/batch_layer/test_rebuild_races.py."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pos_lambda.batch_layer import plan
from pos_lambda.batch_layer.interval import Interval, IntervalError
from pos_lambda.batch_layer.plan import Mode, RebuildError, TableReplaced
from pos_lambda.batch_layer.pointer import DayCommit, Folded, PointerState, Served

TABLE = "0f8e2a7c-1111-2222-3333-444455556666"
OTHER_TABLE = "9a9b9c9d-1111-2222-3333-444455556666"
D1, D2, D3 = date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)
RUN = uuid.UUID("12345678-9abc-11ef-8000-000000000000")


def at(day: date, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


EMPTY = PointerState({}, None, None)
# A pointer after a build at table version 5 and folds up to 9: D1 whole, D2 to 08:00.
SERVED = PointerState(
    {
        D1: Served(at(D2), 9, "f9-0f8e2a7c-5-g5-0f8e2a7c", 120, 40),
        D2: Served(at(D2, 8), 9, "f9-0f8e2a7c-5-g5-0f8e2a7c", 30, 12),
    },
    at(D2, 8),
    7,
    Folded("g5-0f8e2a7c", 9, TABLE),
)


def test_mode_is_a_str_so_the_cli_prints_it_as_before() -> None:
    assert [m.value for m in Mode] == ["fold", "build", "pinned"]
    assert json.dumps({"mode": Mode.PINNED}) == '{"mode": "pinned"}'
    assert f"{Mode.BUILD}" == "build"


# --- pos-batch run: what is refused, which mode ---------------------------------------


def test_a_future_end_is_refused_before_anything_is_written() -> None:
    hour = Interval(at(D2, 8), at(D2, 9))
    with pytest.raises(IntervalError, match="in the future"):
        plan.check_request(hour, None, False, now=at(D2, 8, 57))
    plan.check_request(hour, None, False, now=at(D2, 8, 58))  # within the 2 min tolerance


def test_a_take_over_names_the_table_version_it_serves() -> None:
    with pytest.raises(ValueError, match="pinned to a table version"):
        plan.check_request(Interval(at(D1), at(D2)), None, True, now=at(D3))


def test_a_replaced_table_is_refused_without_the_explicit_flag() -> None:
    with pytest.raises(TableReplaced, match="pos-batch run --new-table") as refused:
        plan.check_table(SERVED, OTHER_TABLE, new_table=False, where="/data/master")
    assert "/data/master" in str(refused.value) and "up to its version 9" in str(refused.value)
    assert plan.check_table(SERVED, OTHER_TABLE, new_table=True, where="/data/master") is True


def test_new_table_is_refused_when_the_table_is_the_counted_one() -> None:
    with pytest.raises(TableReplaced, match="nothing to take over"):
        plan.check_table(SERVED, TABLE, new_table=True, where="/data/master")
    assert plan.check_table(SERVED, TABLE, new_table=False, where="/data/master") is False
    assert plan.check_table(EMPTY, OTHER_TABLE, new_table=False, where="/data/master") is False


@pytest.mark.parametrize(
    ("read", "table", "delta_version", "take_over", "feed", "mode", "why"),
    [
        (SERVED, TABLE, None, False, True, Mode.FOLD, None),
        (SERVED, TABLE, 4, False, True, Mode.PINNED, None),
        (SERVED, TABLE, 4, True, True, Mode.BUILD, None),
        (EMPTY, TABLE, None, False, True, Mode.BUILD, "no committed generation yet"),
        (SERVED, TABLE, None, False, False, Mode.BUILD, "does not record its change data"),
        (SERVED, OTHER_TABLE, None, False, True, Mode.BUILD, "is another table"),
    ],
)
def test_the_mode(
    read: PointerState,
    table: str,
    delta_version: int | None,
    take_over: bool,
    feed: bool,
    mode: Mode,
    why: str | None,
) -> None:
    got, reason = plan.choose_mode(read, table, delta_version, take_over, feed)
    assert got is mode
    assert (reason is None) if why is None else (reason is not None and why in reason)


# --- the fold --------------------------------------------------------------------------


def test_a_fold_commits_its_days_the_table_version_it_folded_and_a_later_horizon() -> None:
    hour = Interval(at(D2, 8), at(D2, 9))
    target = plan.fold_target(SERVED, 12, TABLE)
    assert target.version == "f12-0f8e2a7c-9-g5-0f8e2a7c"
    assert target.generation == "g5-0f8e2a7c"
    days = plan.fold_days(SERVED, hour, [D1, D2], target.version, {D1: 2, D2: 5}, {D1: 41, D2: 14})
    assert days == [
        DayCommit(D1, at(D2), 122, 41, "f12-0f8e2a7c-9-g5-0f8e2a7c"),
        DayCommit(D2, at(D2, 9), 35, 14, "f12-0f8e2a7c-9-g5-0f8e2a7c"),
    ]
    decided = plan.fold_commit(SERVED, hour, target, days)
    assert decided == plan.Commit(days, at(D2, 9), 12, Folded("g5-0f8e2a7c", 12, TABLE))


def test_a_fold_keeps_untouched_days_on_their_version_and_never_shortens_coverage() -> None:
    # A backfill hour of D2 that commits after D2 was covered to 08:00, nothing new on D2.
    early = Interval(at(D2, 2), at(D2, 3))
    days = plan.fold_days(SERVED, early, [D1], "fX", {D1: 1}, {D1: 41})
    assert days == [
        DayCommit(D1, at(D2), 121, 41, "fX"),
        DayCommit(D2, at(D2, 8), 30, 12, "f9-0f8e2a7c-5-g5-0f8e2a7c"),
    ]
    assert plan.fold_commit(SERVED, early, plan.fold_target(SERVED, 9, TABLE), days).horizon == (
        at(D2, 8)  # the served horizon, not the run's earlier end
    )


def test_a_day_of_the_interval_never_served_gets_the_fold_s_empty_version() -> None:
    hour = Interval(at(D3, 0), at(D3, 1))
    assert plan.fold_days(SERVED, hour, [], "fY", {}, {}) == [DayCommit(D3, at(D3, 1), 0, 0, "fY")]


def test_a_fold_needs_a_committed_generation() -> None:
    with pytest.raises(AssertionError):
        plan.fold_target(EMPTY, 3, TABLE)


# --- a build or a pinned run -------------------------------------------------------------


def test_a_build_names_its_generation_by_its_input_and_a_take_over_by_its_run() -> None:
    day = Interval(at(D2), at(D3))
    build = plan.recompute_target(Mode.BUILD, day, 12, TABLE, None, False, RUN)
    assert (build.version, build.take_over, build.since, build.until) == (
        "g12-0f8e2a7c",
        False,
        None,
        None,
    )
    taken = plan.recompute_target(Mode.BUILD, day, 4, TABLE, 4, False, RUN)
    assert (taken.version, taken.take_over) == ("g4-0f8e2a7c-t12345678", True)
    new_table = plan.recompute_target(Mode.BUILD, day, 0, OTHER_TABLE, None, True, RUN)
    assert (new_table.version, new_table.take_over) == ("g0-9a9b9c9d-t12345678", True)
    pinned = plan.recompute_target(Mode.PINNED, day, 4, TABLE, 4, False, RUN)
    assert (pinned.version, pinned.take_over, pinned.since, pinned.until) == (
        "d4-0f8e2a7c-20260302T0000Z-20260303T0000Z",
        False,
        at(D2),
        at(D3),
    )


def test_a_build_moves_every_day_it_covers_as_far_from_a_table_version_as_new() -> None:
    hour = Interval(at(D2, 8), at(D2, 9))
    target = plan.recompute_target(Mode.BUILD, hour, 12, TABLE, None, False, RUN)
    decided = plan.recompute_commit(target, SERVED, hour, {D1: 122, D2: 35}, {D1: 41, D2: 14})
    assert decided == plan.Commit(
        [
            DayCommit(D1, at(D2), 122, 41, "g12-0f8e2a7c"),
            DayCommit(D2, at(D2, 9), 35, 14, "g12-0f8e2a7c"),
        ],
        at(D2, 9),
        12,
        Folded("g12-0f8e2a7c", 12, TABLE),
        [],
    )


def test_a_build_from_an_older_table_version_leaves_the_served_days_alone() -> None:
    hour = Interval(at(D2, 8), at(D2, 9))
    target = plan.recompute_target(Mode.BUILD, hour, 7, TABLE, None, False, RUN)
    decided = plan.recompute_commit(target, SERVED, hour, {D1: 100, D2: 20}, {D1: 30})
    # D1 and D2 were read from table version 9: not moved back to 7.
    assert decided.days == []
    assert [d.day for d in decided.left] == [D1, D2]
    assert decided.horizon == at(D2, 8)  # nothing commits: the served horizon stays


def test_a_pinned_run_moves_nothing_and_a_take_over_moves_every_day_back() -> None:
    day = Interval(at(D2), at(D3))
    pinned = plan.recompute_target(Mode.PINNED, day, 4, TABLE, 4, False, RUN)
    decided = plan.recompute_commit(pinned, SERVED, day, {D2: 20}, {D2: 9})
    assert (decided.days, decided.horizon, decided.folded) == ([], at(D2, 8), None)
    assert decided.left == [DayCommit(D2, at(D3), 20, 9, pinned.version)]

    taken = plan.recompute_target(Mode.BUILD, day, 4, TABLE, 4, False, RUN)
    decided = plan.recompute_commit(taken, SERVED, day, {D1: 100, D2: 20}, {D1: 30, D2: 9})
    # A deliberate rollback: every day, its coverage from this run's end alone.
    assert decided.days == [
        DayCommit(D1, at(D2), 100, 30, "g4-0f8e2a7c-t12345678"),
        DayCommit(D2, at(D3), 20, 9, "g4-0f8e2a7c-t12345678"),
    ]
    assert decided.folded == Folded("g4-0f8e2a7c-t12345678", 4, TABLE)


SOME_DAYS = st.sampled_from([D1, D2, D3])
SERVED_DAYS = st.dictionaries(
    SOME_DAYS,
    st.builds(
        Served,
        st.sampled_from([at(D2), at(D2, 8), at(D3), at(D3, 6), at(date(2026, 3, 4))]),
        st.integers(0, 6),
        st.just("v"),
    ),
)


@given(
    served=SERVED_DAYS,
    counts=st.dictionaries(SOME_DAYS, st.integers(0, 9)),
    table_version=st.integers(0, 6),
    end_hour=st.sampled_from([at(D2, 9), at(D3), at(D3, 6)]),
)
def test_a_build_moves_exactly_the_days_it_takes_no_further_back(
    served: dict[date, Served], counts: dict[date, int], table_version: int, end_hour: datetime
) -> None:
    """The rule restated on its own: a day moves iff it was never served, or the build
    covers it at least as far, from the same or a newer table version; a moved day is
    never covered less than served."""
    interval = Interval(end_hour - timedelta(hours=1), end_hour)
    read = PointerState(served, None, 3, Folded("g", 0, TABLE))
    target = plan.recompute_target(Mode.BUILD, interval, table_version, TABLE, None, False, RUN)
    decided = plan.recompute_commit(target, read, interval, counts, {})
    for d in decided.days:
        if d.day in served:
            assert table_version >= served[d.day].delta_version
            assert d.covered_until >= served[d.day].covered_until
    # A build keeps a day's coverage where an earlier commit took it further, so only
    # the table version can hold a served day back.
    expected_moving = {
        day
        for day in {*served, *counts, *interval.days}
        if day not in served or table_version >= served[day].delta_version
    }
    assert {d.day for d in decided.days} == expected_moving
    assert {d.day for d in decided.left} == {*served, *counts, *interval.days} - expected_moving


# --- pos-batch rebuild ---------------------------------------------------------------------


def test_a_rebuild_s_generation_is_its_own_per_rebuild_id() -> None:
    assert plan.generation_of(7, TABLE) == "r7-0f8e2a7c"
    assert plan.generation_of(7, TABLE, "feedbeef") == "r7-0f8e2a7c-feedbeef"
    assert plan.generation_of(7, TABLE, "feedbeef") != plan.generation_of(7, TABLE, "deadbeef")


def test_a_served_or_ever_committed_generation_is_refused() -> None:
    served = PointerState({}, None, 3, Folded("r7-0f8e2a7c", 7, TABLE))
    with pytest.raises(RebuildError, match="committed already"):
        plan.refuse_committed_generation(served, set(), "r7-0f8e2a7c")
    with pytest.raises(RebuildError, match="committed already"):
        plan.refuse_committed_generation(SERVED, {"r7-0f8e2a7c"}, "r7-0f8e2a7c")
    # A second rebuild at the served table version, with its own id: its own generation.
    plan.refuse_committed_generation(served, {"r7-0f8e2a7c"}, "r7-0f8e2a7c-feedbeef")


def test_a_rebuild_s_future_end_is_refused() -> None:
    now = at(D2, 10, 7)
    with pytest.raises(RebuildError, match="is in the future"):
        plan.ensure_end_passed(at(D2, 10, 15), now)
    plan.ensure_end_passed(at(D2, 10, 9), now)  # within the tolerance
    plan.ensure_end_passed(None, now)


REBUILT = Folded("r9-0f8e2a7c-feedbeef", 9, TABLE)


def test_a_switch_with_nothing_folded_beyond_the_snapshot_commits_the_generation() -> None:
    step = plan.switch(SERVED, REBUILT, {D1: (121, 40)}, {}, None, at(D3), False, "/m")
    assert step.catch_up is None
    assert (step.until, step.horizon) == (at(D2, 8), at(D2, 8))  # the served horizon
    assert step.days == [
        DayCommit(D1, at(D2), 121, 40, "r9-0f8e2a7c-feedbeef"),
        DayCommit(D2, at(D2, 8), 0, 0, "r9-0f8e2a7c-feedbeef"),  # the pointer knows D2
    ]


def test_a_switch_catches_up_what_the_folds_committed_beyond_its_snapshot() -> None:
    rebuilt = Folded("r5-0f8e2a7c-feedbeef", 5, TABLE)
    per_day = {D1: (100, 40), D2: (20, 12)}
    step = plan.switch(SERVED, rebuilt, per_day, {}, at(D2, 9), at(D3), False, "/m")
    assert step.catch_up is not None
    assert step.catch_up.upto == 9  # (5, 9]: what the folds committed meanwhile
    assert step.catch_up.counted == Folded("r5-0f8e2a7c-feedbeef", 9, TABLE)
    assert step.catch_up.window == Interval(at(D2, 8, 45), at(D2, 9))
    # The fold reads the generation, not what is served.
    assert step.catch_up.view == PointerState(
        {
            D1: Served(at(D2), 5, "r5-0f8e2a7c-feedbeef", 100, 40),
            D2: Served(at(D2, 9), 5, "r5-0f8e2a7c-feedbeef", 20, 12),
        },
        at(D2, 8),
        7,
        rebuilt,
    )
    assert step.horizon == at(D2, 9)


def test_a_later_switch_builds_on_an_earlier_catch_up_s_days() -> None:
    rebuilt = Folded("r5-0f8e2a7c-feedbeef", 7, TABLE)  # caught up to 7 once already
    earlier = {D2: DayCommit(D2, at(D2, 8), 25, 13, "f7-0f8e2a7c-5-r5-0f8e2a7c-feedbeef")}
    step = plan.switch(
        SERVED, rebuilt, {D1: (100, 40), D2: (20, 12)}, earlier, None, at(D3), False, "/m"
    )
    assert step.catch_up is not None and step.catch_up.upto == 9
    assert step.catch_up.view.days[D2] == Served(
        at(D2, 8), 7, "f7-0f8e2a7c-5-r5-0f8e2a7c-feedbeef", 25, 13
    )
    assert step.days[1] == earlier[D2]


def test_a_switch_never_counts_another_table_without_the_explicit_flag() -> None:
    rebuilt = Folded("r0-9a9b9c9d", 0, OTHER_TABLE)
    with pytest.raises(RebuildError, match="take it over with --new-table"):
        plan.switch(SERVED, rebuilt, {D1: (3, 1)}, {}, None, at(D3), False, "/m")
    step = plan.switch(SERVED, rebuilt, {D1: (3, 1)}, {}, None, at(D3), True, "/m")
    # Table versions of two tables are not compared: no catch-up of the old table's.
    assert step.catch_up is None


def test_a_switch_without_a_horizon_or_end_is_final_to_the_last_whole_window() -> None:
    step = plan.switch(EMPTY, REBUILT, {D2: (3, 1)}, {}, None, at(D2, 10, 7), False, "/m")
    assert step.until == at(D2, 10) and step.horizon == at(D2, 10)
    assert step.days == [DayCommit(D2, at(D2, 10), 3, 1, REBUILT.generation)]


@given(
    snapshot=st.integers(0, 20),
    folded=st.integers(0, 20),
    commits=st.integers(1, 50),
)
def test_a_switch_never_commits_a_table_version_older_than_the_served_one(
    snapshot: int, folded: int, commits: int
) -> None:
    read = PointerState(
        {D1: Served(at(D2), folded, "f")}, at(D2), commits, Folded("g", folded, TABLE)
    )
    rebuilt = Folded("r", snapshot, TABLE)
    step = plan.switch(read, rebuilt, {D1: (1, 1)}, {}, None, at(D3), False, "/m")
    commits_at = snapshot if step.catch_up is None else step.catch_up.counted.version
    assert commits_at == max(snapshot, folded)
