"""The batch layer's small CQL writes (cassandra-driver): run bookkeeping and the pointer.

The views' rows go through Spark (`adapters.cassandra.upsert`); the pointer is one
single-partition LOGGED batch, which Cassandra applies atomically and in isolation:
a reader sees all days of a committed run or none of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from infra.settings import Settings
from schemas import cql

VIEW_NAME = "batch"  # receipts_batch + agg_15m_batch, committed together


@dataclass(frozen=True)
class DayCommit:
    day: date
    covered_until: datetime
    receipt_count: int
    aggregate_rows: int


def advancing(days: list[DayCommit], covered: Mapping[date, datetime]) -> list[DayCommit]:
    """The days whose pointer this run may move: those it covers at least as far as the
    version now served (`covered`: day -> its covered_until). Runs of a backfill commit
    in any order; without this, an earlier interval committing last would take a day's
    finality back (its windows fall back to the speed view until the next run)."""
    return [d for d in days if d.day not in covered or d.covered_until >= _utc(covered[d.day])]


def _utc(t: datetime) -> datetime:
    # The driver returns timestamps naive, in UTC.
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


class BatchStore:
    def __init__(self, settings: Settings) -> None:
        from infra import cassandra_client

        self._cluster = cassandra_client.cluster(settings, writes=True)
        self.session: Any = self._cluster.connect(settings.cassandra_keyspace)

    def close(self) -> None:
        self._cluster.shutdown()

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record_run(self, run_id: uuid.UUID, fields: Mapping[str, Any]) -> None:
        """Upsert bookkeeping columns of one run (called at start, end and on failure)."""
        cols = ["view_name", "run_id", *fields]
        self.session.execute(
            f"INSERT INTO {cql.BATCH_RUNS_TABLE} ({', '.join(cols)}) "
            f"VALUES ({', '.join(['%s'] * len(cols))})",
            [VIEW_NAME, run_id, *fields.values()],
        )

    def run(self, run_id: uuid.UUID) -> Any:
        return self.session.execute(
            f"SELECT * FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = %s AND run_id = %s",
            [VIEW_NAME, run_id],
        ).one()

    def run_versions(self) -> list[tuple[str, datetime]]:
        """(version, started_at) of every run that got as far as choosing its version."""
        rows = self.session.execute(
            f"SELECT version, started_at FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = %s",
            [VIEW_NAME],
        )
        return [(r.version, r.started_at) for r in rows if r.version and r.started_at]

    def horizon(self) -> datetime | None:
        row = self.session.execute(
            f"SELECT horizon FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = %s LIMIT 1",
            [VIEW_NAME],
        ).one()
        return None if row is None else row.horizon

    def pointers(self) -> dict[date, Any]:
        """The committed version of each day (what readers follow)."""
        rows = self.session.execute(
            f"SELECT * FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = %s", [VIEW_NAME]
        )
        return {r.day.date(): r for r in rows if r.day is not None}

    def commit(
        self,
        run_id: uuid.UUID,
        version: str,
        delta_version: int,
        days: list[DayCommit],
        horizon: datetime,
        committed_at: datetime,
    ) -> None:
        """Point every day of the run at `version`, and set the horizon, atomically."""
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
                    VIEW_NAME,
                    d.day,
                    version,
                    d.covered_until,
                    run_id,
                    delta_version,
                    d.receipt_count,
                    d.aggregate_rows,
                    committed_at,
                ),
            )
        batch.add(
            self.session.prepare(
                f"INSERT INTO {cql.BATCH_POINTER_TABLE} (view_name, horizon) VALUES (?, ?)"
            ),
            (VIEW_NAME, horizon),
        )
        self.session.execute(batch)
