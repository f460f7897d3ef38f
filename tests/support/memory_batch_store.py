"""An in-memory batch pointer behind the `BatchPointer` port
(src/pos_lambda/batch_layer/pointer.py), for unit tests only.

What it mirrors of `BatchStore` (Cassandra):
- **The conditional commit.** The pointer's partition has one static `commits` counter;
  a commit names the counter it read (`read.commits`, None before the first commit) and
  applies only if the counter is still that (the LWT `IF commits = ?`), else raises
  `CommitConflict` and writes nothing. Applied, it writes every day, the horizon, the
  counter + 1 and (if given) the folded mark together: a reader never sees part of it.
- **Upserts.** A day's row is replaced whole by a commit that names it; days a commit
  does not name keep their rows; each written day records the commit's table version.
- **Run bookkeeping.** `record_run` upserts the given columns of a run's row (checked
  against the table's columns, as the adapter does); `committed_versions` and
  `run_versions` read the rows as the adapter's queries do.

`commits_applied` lists every applied commit's resulting state, in order, for tests that
check an invariant after every step of a race.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pos_lambda.batch_layer import runs
from pos_lambda.batch_layer.pointer import (
    CommitConflict,
    DayCommit,
    Folded,
    PointerState,
    Served,
)


class MemoryBatchStore:
    def __init__(self) -> None:
        self._days: dict[date, Served] = {}
        self._horizon: datetime | None = None
        self._commits: int | None = None
        self._folded: Folded | None = None
        self._runs: dict[uuid.UUID, dict[str, Any]] = {}
        self.commits_applied: list[PointerState] = []
        self.conflicts = 0  # commits refused

    # --- the pointer ------------------------------------------------------------------

    def state(self) -> PointerState:
        return PointerState(dict(self._days), self._horizon, self._commits, self._folded)

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
        if self._commits != read.commits:
            self.conflicts += 1
            raise CommitConflict(
                f"another batch run committed the pointer while this run ({run_id}) was "
                f"computing (commit counter {read.commits} when read, {self._commits} now)"
            )
        written = dict(self._days)
        for d in days:
            written[d.day] = Served(
                d.covered_until, delta_version, d.version, d.receipt_count, d.aggregate_rows
            )
        # One assignment each, nothing that can fail in between: all or nothing.
        self._days = written
        self._horizon = horizon
        self._commits = (read.commits or 0) + 1
        if folded is not None:
            self._folded = folded
        self.commits_applied.append(self.state())

    # --- run bookkeeping ----------------------------------------------------------------

    def record_run(self, run_id: uuid.UUID, fields: Mapping[str, Any]) -> None:
        runs.check_columns(fields)
        self._runs.setdefault(run_id, {}).update(fields)

    def run(self, run_id: uuid.UUID) -> runs.BatchRun | None:
        row = self._runs.get(run_id)
        if row is None:
            return None
        values = {name: row.get(name) for name in runs.COLUMNS if name != "status"}
        return runs.BatchRun(run_id=str(run_id), status=row.get("status") or "unknown", **values)

    def runs_since(self, since: datetime) -> list[runs.BatchRun]:
        # As the adapter's slice `run_id >= minTimeuuid(since)`: a time UUID's own instant.
        found = []
        for run_id in sorted(self._runs, key=lambda r: r.time):
            run = self.run(run_id)
            if run is not None and _instant(run_id) >= since:
                found.append(run)
        return found

    def run_versions(self) -> list[tuple[str, datetime]]:
        return [
            (row["version"], max(t for t in (row["started_at"], row.get("finished_at")) if t))
            for row in self._runs.values()
            if row.get("version") and row.get("started_at")
        ]

    def committed_versions(self) -> set[str]:
        return {
            row["version"]
            for row in self._runs.values()
            if row.get("version") and row.get("status") == "committed"
        }

    # --- for tests ----------------------------------------------------------------------

    def seed(self, state: PointerState) -> None:
        """Start from a pointer as some earlier commits left it."""
        self._days = dict(state.days)
        self._horizon = state.horizon
        self._commits = state.commits
        self._folded = state.folded


_UUID_EPOCH = datetime(1582, 10, 15, tzinfo=UTC)


def _instant(run_id: uuid.UUID) -> datetime:
    """The instant of a time UUID (uuid1: 100 ns ticks since the Gregorian reform)."""
    return _UUID_EPOCH + timedelta(microseconds=run_id.time // 10)
