"""The batch layer's small CQL writes (cassandra-driver): run bookkeeping and the pointer.

The views' rows go through Spark (`pos_lambda.adapters.cassandra.upsert`); the pointer is one
single-partition LOGGED batch, which Cassandra applies atomically and in isolation:
a reader sees all days of a committed run or none of them.

The batch is conditional (a lightweight transaction on the partition's static
`commits` counter): a run reads the pointer's state once, decides from it which days
it may move, and commits only if no other commit came in between. Two runs that race
(a manual run beside the DAG's) can therefore not interleave: one commits, the other
gets `CommitConflict` and leaves its rows, never pointed to, for `pos-batch gc`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Protocol

from pos_lambda.backoff import Backoff, retry
from pos_lambda.batch_layer import runs
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings

log = logging.getLogger("pos.batch")

# A conditional commit that timed out may or may not have applied (a replica died inside
# its Paxos round: "CAS operation timed out"). It is sent again on the same condition
# until it answers, for at most this long: Paxos makes the next round finish a proposal
# that was accepted first, so the answer then tells which.
COMMIT_PATIENCE_S = 30.0
# The waits between those sends: 0.5 s, doubling, at most 4 s.
COMMIT_BACKOFF = Backoff(0.5, cap_s=4.0)


class NothingToDo(Exception):
    """No master dataset yet: the archiver creates it with its first micro-batch."""


class CommitConflict(RuntimeError):
    """Another run committed the pointer after this run read it: this run's commit is
    refused (its rows stay unpointed until `pos-batch gc`)."""


@dataclass(frozen=True)
class DayCommit:
    day: date
    covered_until: datetime
    receipt_count: int
    aggregate_rows: int
    version: str  # the day's agg_15m_batch version


@dataclass(frozen=True)
class Served:
    """What the pointer names for one day: how far its version is final, the master
    dataset's table version it was read from, and its aggregates' version."""

    covered_until: datetime
    delta_version: int
    version: str = ""
    receipt_count: int = 0
    aggregate_rows: int = 0


@dataclass(frozen=True)
class Folded:
    """How far the batch views count the master dataset: every record of table
    `table_id` up to table version `version`, in index and receipts `generation`."""

    generation: str
    version: int
    table_id: str


@dataclass(frozen=True)
class PointerState:
    """The pointer as one run read it: the days served, the horizon, the commit counter
    its conditional commit is checked against, and how far the views count the master
    dataset (None: built by an older release, or never)."""

    days: Mapping[date, Served]
    horizon: datetime | None
    commits: int | None  # None: nothing was ever committed
    folded: Folded | None = None


def advancing(
    days: list[DayCommit], served: Mapping[date, Served], delta_version: int
) -> list[DayCommit]:
    """The days whose pointer this run may move: those it covers at least as far as the
    version now served, read from the same or a newer table version. Runs of a backfill
    commit in any order; without the coverage rule, an earlier interval committing last
    would take a day's finality back (its windows fall back to the speed view until the
    next run); without the table-version rule, a rerun pinned to an older version
    (`--delta-version`) would replace a day's receipts with an older, smaller set."""
    return [
        d
        for d in days
        if d.day not in served
        or (
            d.covered_until >= _utc(served[d.day].covered_until)
            and delta_version >= served[d.day].delta_version
        )
    ]


def _utc(t: datetime) -> datetime:
    # The driver returns timestamps naive, in UTC.
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def commit_through_timeouts(
    execute: Callable[[], Any],
    holds_this_commit: Callable[[], bool],
    timeouts: tuple[type[BaseException], ...],
    patience_s: float = COMMIT_PATIENCE_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Run the conditional write `execute` (its result has `was_applied`) until it
    answers; whether this commit is in. After a timeout, a "not applied" may be this
    commit's own first attempt, which did apply: `holds_this_commit` reads the pointer
    to tell. A timeout past `patience_s` is raised."""
    timed_out = False

    def note_timeout(exc: Exception, wait: float) -> None:
        nonlocal timed_out
        log.warning(
            "the pointer's conditional commit timed out (%s); sending it again in %.1f s",
            exc, wait,
        )  # fmt: skip
        timed_out = True

    # The waits give the failure detector time to catch up; they synchronise nothing.
    result = retry(
        execute,
        COMMIT_BACKOFF,
        retriable=lambda exc: isinstance(exc, timeouts),
        patience_s=patience_s,
        clock=clock,
        sleep=sleep,
        on_retry=note_timeout,
        wait_may_overrun=False,
    )
    return bool(result.was_applied) or (timed_out and holds_this_commit())


class BatchPointer(Protocol):
    """The port to the pointer and the runs' bookkeeping, as the batch shells use it
    (job.py, rebuild.py, cleanup.py, quality_report.py). `BatchStore` is the adapter
    (Cassandra); tests/support/memory_batch_store.py the in-memory fake of the unit tests,
    with the same conditional commit. The views' rows are not behind it: Spark writes
    those (`pos_lambda.adapters.cassandra`)."""

    def state(self) -> PointerState:
        """The pointer as it is now (days, horizon, commit counter, folded mark)."""
        ...

    def commit(
        self,
        run_id: uuid.UUID,
        delta_version: int,
        days: list[DayCommit],
        horizon: datetime,
        committed_at: datetime,
        read: PointerState,
        folded: Folded | None = None,
    ) -> None:
        """Every day of `days` and the horizon (and `folded`) at once, if the commit
        counter is still `read.commits`; else CommitConflict, and nothing is written."""
        ...

    def record_run(self, run_id: uuid.UUID, fields: Mapping[str, Any]) -> None: ...

    def run(self, run_id: uuid.UUID) -> runs.BatchRun | None: ...

    def runs_since(self, since: datetime) -> list[runs.BatchRun]: ...

    def run_versions(self) -> list[tuple[str, datetime]]:
        """(version, last progress) of every run that chose its version."""
        ...

    def committed_versions(self) -> set[str]:
        """Every version a run ever committed."""
        ...


class BatchStore:
    """The Cassandra adapter of `BatchPointer` (and the driver session the fold's
    lookups and `pos-batch gc` use)."""

    def __init__(self, settings: Settings) -> None:
        from pos_lambda.adapters import cassandra_client

        self.settings = settings
        self._cluster = cassandra_client.cluster(settings, writes=True)
        self.session: Any = self._cluster.connect(settings.cassandra.keyspace)

    def close(self) -> None:
        self._cluster.shutdown()

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record_run(self, run_id: uuid.UUID, fields: Mapping[str, Any]) -> None:
        """Upsert bookkeeping columns of one run (called at start, end and on failure)."""
        runs.check_columns(fields)
        cols = ["view_name", "run_id", *fields]
        self.session.execute(
            f"INSERT INTO {cql.BATCH_RUNS_TABLE} ({', '.join(cols)}) "
            f"VALUES ({', '.join(['%s'] * len(cols))})",
            [cql.BATCH_VIEW_NAME, run_id, *fields.values()],
        )

    def run(self, run_id: uuid.UUID) -> runs.BatchRun | None:
        row = self.session.execute(
            f"SELECT * FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = %s AND run_id = %s",
            [cql.BATCH_VIEW_NAME, run_id],
        ).one()
        return None if row is None else runs.BatchRun.from_row(row)

    def runs_since(self, since: datetime) -> list[runs.BatchRun]:
        """The runs that started at or after `since` (run ids are time UUIDs of their
        start: a slice of the partition's clustering order, not a scan of every run)."""
        rows = self.session.execute(
            f"SELECT * FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = %s "
            "AND run_id >= minTimeuuid(%s)",
            [cql.BATCH_VIEW_NAME, since],
        )
        return [runs.BatchRun.from_row(r) for r in rows]

    def run_versions(self) -> list[tuple[str, datetime]]:
        """(version, last progress) of every run that got as far as choosing its version:
        when it finished, or started if it has not (a rebuild's chunks each record theirs,
        so a step-wise rebuild's generation counts from its last step, not its first)."""
        rows = self.session.execute(
            f"SELECT version, started_at, finished_at FROM {cql.BATCH_RUNS_TABLE} "
            "WHERE view_name = %s",
            [cql.BATCH_VIEW_NAME],
        )
        return [
            (r.version, max(t for t in (r.started_at, r.finished_at) if t is not None))
            for r in rows
            if r.version and r.started_at
        ]

    def committed_versions(self) -> set[str]:
        """Every version a run ever committed (a generation among them)."""
        rows = self.session.execute(
            f"SELECT version, status FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = %s",
            [cql.BATCH_VIEW_NAME],
        )
        return {r.version for r in rows if r.version and r.status == "committed"}

    def state(self) -> PointerState:
        """The pointer as it is now: one read of the partition (days, horizon, counter).

        A run decides on this read, so it is a SERIAL read: one that finishes any Paxos
        round on the pointer a dead coordinator left half done, rather than read past it."""
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        read = SimpleStatement(
            f"SELECT day, covered_until, delta_version, version, receipt_count, "
            f"aggregate_rows, horizon, "
            f"commits, generation, folded_version, folded_table "
            f"FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = %s",
            consistency_level=getattr(ConsistencyLevel, self.settings.cassandra.serial_consistency),
        )
        rows = self.session.execute(read, [cql.BATCH_VIEW_NAME]).all()
        days = {
            r.day.date(): Served(
                _utc(r.covered_until),
                int(r.delta_version or 0),
                r.version or "",
                int(r.receipt_count or 0),
                int(r.aggregate_rows or 0),
            )
            for r in rows
            if r.day is not None and r.covered_until is not None
        }
        first = rows[0] if rows else None
        if first is None:
            return PointerState(days, None, None)
        horizon = None if first.horizon is None else _utc(first.horizon)
        folded = None
        if first.generation and first.folded_version is not None and first.folded_table:
            folded = Folded(first.generation, int(first.folded_version), first.folded_table)
        return PointerState(days, horizon, first.commits, folded)

    def horizon(self) -> datetime | None:
        row = self.session.execute(
            f"SELECT horizon FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = %s LIMIT 1",
            [cql.BATCH_VIEW_NAME],
        ).one()
        return None if row is None else row.horizon

    def pointers(self) -> dict[date, Any]:
        """The committed version of each day (what readers follow)."""
        rows = self.session.execute(
            f"SELECT * FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = %s", [cql.BATCH_VIEW_NAME]
        )
        return {r.day.date(): r for r in rows if r.day is not None}

    def commit(
        self,
        run_id: uuid.UUID,
        delta_version: int,
        days: list[DayCommit],
        horizon: datetime,
        committed_at: datetime,
        read: PointerState,
        folded: Folded | None = None,
    ) -> None:
        """Point every day at its version, set the horizon (and, for a run that counts
        the master dataset up to `folded`, that mark), atomically, if the pointer is
        still as `read` (else CommitConflict: nothing is written)."""
        from cassandra.query import BatchStatement, BatchType

        batch = BatchStatement(batch_type=BatchType.LOGGED)
        insert = self.session.prepare(
            f"INSERT INTO {cql.BATCH_POINTER_TABLE} (view_name, day, version, covered_until, "
            "run_id, delta_version, receipt_count, aggregate_rows, committed_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        for d in days:
            batch.add(
                insert,
                (
                    cql.BATCH_VIEW_NAME,
                    d.day,
                    d.version,
                    d.covered_until,
                    run_id,
                    delta_version,
                    d.receipt_count,
                    d.aggregate_rows,
                    committed_at,
                ),
            )
        # The condition: a single-partition conditional batch applies all its statements
        # or none (a Paxos round on the pointer's partition).
        sets, values = ["horizon = ?", "commits = ?"], [horizon, (read.commits or 0) + 1]
        if folded is not None:
            sets += ["generation = ?", "folded_version = ?", "folded_table = ?"]
            values += [folded.generation, folded.version, folded.table_id]
        batch.add(
            self.session.prepare(
                f"UPDATE {cql.BATCH_POINTER_TABLE} SET {', '.join(sets)} "
                "WHERE view_name = ? IF commits = ?"
            ),
            (*values, cql.BATCH_VIEW_NAME, read.commits),
        )
        from cassandra import OperationTimedOut, WriteTimeout

        results: list[Any] = []

        def execute() -> Any:
            results.append(self.session.execute(batch))
            return results[-1]

        def holds_this_commit() -> bool:
            now = self.state()  # SERIAL: it sees a Paxos round that applied
            return (
                now.commits == (read.commits or 0) + 1
                and now.horizon
                == _utc(horizon).replace(microsecond=horizon.microsecond // 1000 * 1000)
                and all(
                    (served := now.days.get(d.day)) is not None and served.version == d.version
                    for d in days
                )
            )

        if not commit_through_timeouts(
            execute, holds_this_commit, (WriteTimeout, OperationTimedOut)
        ):
            now = results[-1].one()
            raise CommitConflict(
                f"another batch run committed the pointer while this run ({run_id}) was "
                f"computing (commit counter {read.commits} when read, "
                f"{getattr(now, 'commits', None)} now): not committing; "
                "its rows stay unpointed until `pos-batch gc`. Rerun to recompute on top."
            )
