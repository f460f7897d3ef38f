"""The batch layer's commit plan, pure: what a run may serve, decided from what it read.

No Spark, no Cassandra, no clock: every input is a value (the pointer as the run read
it at its start, `PointerState`; the snapshot's table version and table id; the
interval; the per-day counts the run computed; `now` where a future end is refused).
The shells call it and do what it says:

- `batch_layer/job.py` (`pos-batch run`): `check_request`, `check_table`,
  `choose_mode`, then `fold_target` + `fold_commit` (a fold) or `recompute_target` +
  `recompute_commit` (a build or a pinned run);
- `batch_layer/rebuild.py` (`pos-batch rebuild`): `generation_of`,
  `refuse_committed_generation`, `ensure_end_passed`, and at its switch `switch` (is a
  catch-up fold of (V, F] needed first?) then `merged`.

The one rule every commit keeps: it never serves a table version older than what is
served, never mixes two tables (a new table id is taken over only on purpose), and only
moves days it covers at least as far (`store.advancing`). Unit tests:
tests/unit/batch_layer/test_plan.py (with the in-memory pointer of
tests/support/memory_batch_store.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from enum import StrEnum

from pos_lambda.batch_layer.interval import END_TOLERANCE, Interval
from pos_lambda.batch_layer.pointer import DayCommit, Folded, PointerState, Served, advancing
from pos_lambda.views.windows import window_start


class Mode(StrEnum):
    """How a `pos-batch run` computes its version (the module doc of job.py says more).
    A str, so that `RunResult.mode` shows as its value ("fold", not "Mode.FOLD") in the
    CLI's JSON."""

    FOLD = "fold"  # the records archived since the last commit, into the generation
    BUILD = "build"  # every record at one table version: a new generation of every day
    PINNED = "pinned"  # the interval's days at one table version, not served


class TableReplaced(RuntimeError):
    """The master dataset is another Delta table than the one the views count: a silent
    build would compare table versions of two tables; the operator decides."""


class RebuildError(RuntimeError):
    """A rebuild that cannot go on (a chunk missing at the commit, a misplaced key, a
    generation already committed, a future end, another table)."""


# --- pos-batch run -------------------------------------------------------------------


def check_request(
    interval: Interval, delta_version: int | None, take_over: bool, now: datetime
) -> None:
    """Refuse, before anything is written, what no table can make right: an interval
    that has not ended (IntervalError), a take-over of no pinned version (ValueError)."""
    interval.ensure_ended(now)
    if take_over and delta_version is None:
        raise ValueError("take_over is for a run pinned to a table version (delta_version)")


def check_table(read: PointerState, table_id: str, new_table: bool, where: str) -> bool:
    """Whether the master dataset (`table_id`, at `where`) replaced the table the views
    count; refused unless taken over on purpose (`new_table`), and `new_table` refused
    when nothing was replaced. A silent build would compare the served table versions
    of one table with another's (issue 62, case 3: every day stalled)."""
    replaced = read.folded is not None and read.folded.table_id != table_id
    if replaced and not new_table:
        assert read.folded is not None
        raise TableReplaced(
            f"the master dataset at {where} is another Delta table "
            f"({table_id}) than the one the batch views count ({read.folded.table_id}, up to "
            f"its version {read.folded.version}). If it replaced the old one on purpose (a "
            "restore, a move), take it over with `pos-batch run --new-table` (a build from "
            "it then serves every day); otherwise point POS_DATA_DIR at the counted table"
        )
    if new_table and not replaced:
        raise TableReplaced(
            f"--new-table: the master dataset is the table the views count ({table_id}): "
            "nothing to take over"
        )
    return replaced


def why_build(read: PointerState, table_id: str, change_feed: bool) -> str | None:
    """Why an unpinned run cannot fold (None: it can)."""
    if read.folded is None:
        return "no committed generation yet (a first run, or views of an older release)"
    if read.folded.table_id != table_id:
        return f"the master dataset is another table ({table_id}, was {read.folded.table_id})"
    if not change_feed:
        return "the master dataset does not record its change data feed"
    return None


def choose_mode(
    read: PointerState,
    table_id: str,
    delta_version: int | None,
    take_over: bool,
    change_feed: bool,
) -> tuple[Mode, str | None]:
    """The run's mode, and why it builds when it could have folded (for the log).
    `change_feed`: whether the table records its change data feed (read for an unpinned
    run only: a pinned one never folds)."""
    if delta_version is not None:
        return (Mode.BUILD, None) if take_over else (Mode.PINNED, None)
    reason = why_build(read, table_id, change_feed)
    return (Mode.FOLD, None) if reason is None else (Mode.BUILD, reason)


@dataclass(frozen=True)
class Commit:
    """One conditional write of the pointer, as decided (nothing to write: no `days`).

    days: the days whose pointer moves, each to its version and coverage;
    horizon: the horizon committed (or, when nothing moves, the one that stays);
    table_version: how far the committed days read the master dataset;
    folded: the mark of how far the views count the table (None: left as it is);
    left: the days the run computed but leaves on the versions served (for the log).
    """

    days: list[DayCommit]
    horizon: datetime
    table_version: int
    folded: Folded | None
    left: list[DayCommit] = field(default_factory=list)


def advanced_horizon(interval_end: datetime, read: PointerState) -> datetime:
    """A commit's horizon: the run's end, never before the one served (runs of a backfill
    commit in any order)."""
    return max(interval_end, read.horizon) if read.horizon else interval_end


@dataclass(frozen=True)
class FoldTarget:
    """What a fold of (read.folded.version, upto] writes and commits besides its days."""

    version: str  # the aggregates' version of the touched days
    generation: str  # where its receipts and index rows go
    marker: Folded  # how far the views count the table after it


def fold_target(read: PointerState, upto: int, table_id: str) -> FoldTarget:
    assert read.folded is not None, "a fold continues a committed generation"
    return FoldTarget(
        fold_version(read.folded, upto),
        read.folded.generation,
        Folded(read.folded.generation, upto, table_id),
    )


def fold_commit(
    read: PointerState, interval: Interval, target: FoldTarget, days: list[DayCommit]
) -> Commit:
    """A fold commits every day it computed (`fold_days`: none goes back, by
    construction) and the table version it folded up to."""
    return Commit(days, advanced_horizon(interval.end, read), target.marker.version, target.marker)


def fold_version(folded: Folded, upto: int) -> str:
    """The aggregates' version of the fold of table versions (after, upto] into a
    generation: the same fold (a rerun after a kill) rewrites the same rows; the same
    versions folded into another generation (a rebuild's catch-up) write their own."""
    return f"f{upto}-{folded.table_id.replace('-', '')[:8]}-{folded.version}-{folded.generation}"


def day_coverage(day: date, end: datetime) -> datetime:
    """How far into `day` a run that counts every record archived before `end` makes
    it final: to its end, or to `end` within it; nothing for a day that starts later."""
    start = datetime.combine(day, time(0), tzinfo=end.tzinfo)
    return max(start, min(start + timedelta(days=1), end))


def fold_days(
    read: PointerState,
    interval: Interval,
    touched: list[date],
    version: str,
    new_receipts: Mapping[date, int],
    aggregate_rows: Mapping[date, int],
) -> list[DayCommit]:
    """The pointer rows a fold writes: every touched day on the fold's version, every
    other day of the interval on its served version (or the fold's, empty, if none), each
    covered as far as the run's end makes it final, never less than it was."""
    out = []
    for day in sorted({*touched, *interval.days}):
        served = read.days.get(day)
        covered = day_coverage(day, interval.end)
        if served is not None:
            covered = max(covered, served.covered_until)
        if day in touched or served is None:
            day_version, day_rows = version, aggregate_rows.get(day, 0)
        else:
            day_version, day_rows = served.version, served.aggregate_rows
        receipts = (served.receipt_count if served else 0) + new_receipts.get(day, 0)
        out.append(DayCommit(day, covered, receipts, day_rows, day_version))
    return out


@dataclass(frozen=True)
class RecomputeTarget:
    """What a build or a pinned run writes, decided before any row is.

    since/until: the event time whose winners it writes (None: every day, a build);
    take_over: it serves what it computed whatever the pointer names (a deliberate
    rollback to a pinned table version, or a new table taken over)."""

    mode: Mode
    version: str
    table_version: int
    table_id: str
    take_over: bool
    since: datetime | None
    until: datetime | None


def recompute_target(
    mode: Mode,
    interval: Interval,
    table_version: int,
    table_id: str,
    delta_version: int | None,
    new_table: bool,
    run_id: uuid.UUID,
) -> RecomputeTarget:
    """The version a build (every day, a new generation) or a pinned run (the
    interval's days) writes, at the snapshot's `table_version` of `table_id`."""
    assert mode in (Mode.BUILD, Mode.PINNED), mode
    take_over = mode is Mode.BUILD and (delta_version is not None or new_table)
    if mode is Mode.BUILD:
        # The same build input, the same name (a rerun after a kill rewrites the same
        # rows); a take-over's of its own, apart from a generation folds have grown.
        table8 = table_id.replace("-", "")[:8]
        version = f"g{table_version}-{table8}" + (f"-t{run_id.hex[:8]}" if take_over else "")
        return RecomputeTarget(mode, version, table_version, table_id, take_over, None, None)
    return RecomputeTarget(
        mode,
        interval.version_key(table_id, table_version),
        table_version,
        table_id,
        take_over,
        interval.recompute_start,
        interval.end,
    )


def recompute_commit(
    target: RecomputeTarget,
    read: PointerState,
    interval: Interval,
    receipts: Mapping[date, int],
    aggregate_rows: Mapping[date, int],
) -> Commit:
    """The days a build or a pinned run moves to its version, from its per-day counts.

    A pinned run moves none (written for inspection; `--take-over` serves it). A
    take-over moves every day, whatever is served. A build moves every day it covers as
    far as served, read from the same or a newer table version (`store.advancing`)."""
    if target.mode is Mode.BUILD:
        covered = sorted({*receipts, *aggregate_rows, *read.days, *interval.days})
    else:
        covered = interval.days
    days = [
        DayCommit(
            day,
            _coverage(day, interval, target, read),
            receipts.get(day, 0),
            aggregate_rows.get(day, 0),
            target.version,
        )
        for day in covered
    ]
    if target.mode is Mode.PINNED:
        moving: list[DayCommit] = []
    elif target.take_over:
        moving = days
    else:
        moving = advancing(days, read.days, target.table_version)
    horizon = advanced_horizon(interval.end, read)
    if not moving:
        horizon = read.horizon or horizon  # nothing commits: the served horizon stays
    folded = None
    if target.mode is Mode.BUILD:
        folded = Folded(target.version, target.table_version, target.table_id)
    left = [d for d in days if d not in moving]
    return Commit(moving, horizon, target.table_version, folded, left)


def _coverage(
    day: date, interval: Interval, target: RecomputeTarget, read: PointerState
) -> datetime:
    """How far into `day` this run's version is final. A pinned run: its interval's
    rule. A build counts every record archived before the interval's end, on every day;
    it keeps a day's coverage where an earlier commit took it further, except when it
    takes over (a deliberate rollback to an older table version)."""
    if target.mode is Mode.PINNED:
        return interval.covered_until(day)
    covered = day_coverage(day, interval.end)
    served = read.days.get(day)
    if served is not None and not target.take_over:
        covered = max(covered, served.covered_until)
    return covered


# --- pos-batch rebuild ---------------------------------------------------------------


def generation_of(delta_version: int, table_id: str, rebuild_id: str | None = None) -> str:
    """The generation a rebuild at this table version writes. Every step of one rebuild
    names the same `rebuild_id` (the rebuild's plan draws it), so a rerun of a step writes
    the same generation, and a second rebuild at the same table version a new one; without
    an id (steps run by hand), the table version's own name, refused once it was served."""
    name = f"r{delta_version}-{table_id.replace('-', '')[:8]}"
    return name if rebuild_id is None else f"{name}-{rebuild_id}"


def refuse_committed_generation(
    read: PointerState, committed_versions: set[str], generation: str
) -> None:
    """Refuse to write into a generation that is served, or was ever committed: its rows
    would show at once (or be mixed with the old ones), and rows the new rule no longer
    produces would never go away (issue 62, case 2)."""
    if (read.folded is not None and read.folded.generation == generation) or (
        generation in committed_versions
    ):
        raise RebuildError(
            f"generation {generation} has been committed already: a rebuild at a table "
            "version already served writes a new generation. Run `pos-batch rebuild` "
            "(it names its own), or give every step the same new --rebuild-id"
        )


def ensure_end_passed(end: datetime | None, now: datetime) -> None:
    """A rebuild makes the days final up to its `end`: refused in the future, as
    `pos-batch run` refuses an interval that has not ended."""
    if end is not None and end > now + END_TOLERANCE:
        raise RebuildError(
            f"--end {end.isoformat()} is in the future (now {now.isoformat()}): a rebuild "
            "makes the days final up to its end, so it only runs over time that has passed"
        )


@dataclass(frozen=True)
class CatchUp:
    """A fold of table versions (counted.version, upto] into the rebuild's generation,
    due before its switch: the hourly folds committed them after its snapshot.

    view: the generation as the fold reads it (its days on the rebuild's aggregates, or
    an earlier catch-up's); window: the last window before `until` (the fold's interval:
    it folds every record into its own day whatever the interval);
    counted: how far the generation counts the table once the fold is done."""

    view: PointerState
    window: Interval
    upto: int
    counted: Folded


@dataclass(frozen=True)
class Switch:
    """One try of a rebuild's switch, decided from the pointer as read for it.

    days: every day on the generation (or on an earlier catch-up's fold version), before
    this try's catch-up; horizon: the horizon it commits; catch_up: a fold to run first
    (None: the generation counts as far as the pointer does)."""

    days: list[DayCommit]
    until: datetime
    horizon: datetime
    catch_up: CatchUp | None


def switch(
    read: PointerState,
    counted: Folded,
    per_day: Mapping[date, tuple[int, int]],
    caught_up_days: Mapping[date, DayCommit],
    end: datetime | None,
    now: datetime,
    new_table: bool,
    where: str,
) -> Switch:
    """A rebuild's switch from the pointer as `read` now. `counted`: how far the
    generation counts the table (its snapshot, or an earlier catch-up's fold);
    `per_day`: the generation's (receipts, aggregate rows) per day; `caught_up_days`:
    days an earlier catch-up folded into the generation (on their fold's aggregates
    version from then on: a later catch-up adds to those, not to the rebuild's own).

    The hourly folds may have committed table versions after `counted`: those must be
    folded into the generation first (`catch_up`), or the switch would take the served
    views back to an older table version (issue 62, case 1). Refuses the views of
    another table (`where`: the master dataset's place) unless `new_table`."""
    if read.folded is not None and read.folded.table_id != counted.table_id and not new_table:
        raise RebuildError(
            f"the batch views count another Delta table ({read.folded.table_id}, up to "
            f"version {read.folded.version}) than the master dataset now at "
            f"{where} ({counted.table_id}): if it replaced the old "
            "one on purpose (a restore, a move), take it over with --new-table"
        )
    until = end or read.horizon or window_start(now)
    days = merged(rebuilt_days(read, per_day, counted.generation, until), caught_up_days)
    horizon = advanced_horizon(until, read)
    catch_up = None
    if (
        read.folded is not None
        and read.folded.table_id == counted.table_id
        and read.folded.version > counted.version
    ):
        view = PointerState(
            {
                d.day: Served(
                    d.covered_until, counted.version, d.version, d.receipt_count, d.aggregate_rows
                )
                for d in days
            },
            read.horizon,
            read.commits,
            counted,
        )
        catch_up = CatchUp(
            view,
            Interval(until - timedelta(minutes=15), until),
            read.folded.version,
            Folded(counted.generation, read.folded.version, counted.table_id),
        )
    return Switch(days, until, horizon, catch_up)


def rebuilt_days(
    read: PointerState, per_day: Mapping[date, tuple[int, int]], generation: str, until: datetime
) -> list[DayCommit]:
    """Every day the generation or the pointer knows, on the generation's aggregates,
    final as far as `until` makes it or an earlier commit took it."""
    days = []
    for day in sorted({*per_day, *read.days}):
        covered = day_coverage(day, until)
        served = read.days.get(day)
        if served is not None:
            covered = max(covered, served.covered_until)
        receipts, rows = per_day.get(day, (0, 0))
        days.append(DayCommit(day, covered, receipts, rows, generation))
    return days


def merged(days: list[DayCommit], caught_up_days: Mapping[date, DayCommit]) -> list[DayCommit]:
    """`days` with the caught-up days in their place (and any they add), by day."""
    return sorted({**{d.day: d for d in days}, **caught_up_days}.values(), key=lambda d: d.day)
