"""Delete batch-view versions nothing points to (orphans of killed runs, replaced versions).

    pos-batch gc [--grace-hours 3] [--dry-run]

A run writes its rows under its own version key and commits by moving the pointer, so
two kinds of versions pile up: a run killed before its commit leaves an orphan, and a
commit leaves the day's previous version behind. Neither is ever served; both cost disk.

Which versions stay (`doomed`, pure, unit-tested):
- every version the pointer names (what readers follow), and the current generation
  (every day's receipts partition, and the natural-key index rows: batch_layer/fold.py);
- every version a run wrote within the grace period, counted from the run's last
  progress (its start, its end, each step of a rebuild): a run still writing has not
  committed yet, and a reader that read the pointer just before a commit may still be
  reading the previous version. The grace must exceed the longest run step (the DAG's
  `dagrun_timeout`, 2 h), hence 3 h by default. A rebuild's commit checks its
  generation's receipts are all there, so one left longer than that between its steps
  is refused (run its chunks again), never served with holes.

The daily maintenance DAG runs it in the batch pool, so it never overlaps a run; by
hand it is safe too, thanks to the grace. Partitions are deleted whole (one tombstone
per (store, day, version)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from pos_lambda.adapters import cassandra_client
from pos_lambda.batch_layer.pointer import BatchStore
from pos_lambda.schemas import cql

# Each versioned table, and the column that names its partitions' day.
VERSIONED_TABLES = {
    cql.RECEIPTS_BATCH_TABLE: "day",
    cql.AGG_BATCH_TABLE: "day",
    cql.CONFLICTS_BATCH_TABLE: "winner_day",
    cql.GAPS_BATCH_TABLE: "day",
}


@dataclass(frozen=True, order=True)
class Partition:
    """One version of one store-day in one versioned table."""

    table: str
    operation_id: int
    day: date
    version: str


def doomed(
    partitions: Iterable[Partition],
    pointed: Mapping[date, str],
    last_written: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
    generation: str | None = None,
) -> list[Partition]:
    """The partitions to delete: not pointed to, not of the current `generation`, and
    not written by a run within `grace`.

    pointed: day -> the committed version; last_written: version -> the last progress
    of a run that wrote it (a version no run mentions is an orphan of unknown age).
    """
    keep_after = now - grace
    return sorted(
        p
        for p in partitions
        if pointed.get(p.day) != p.version
        and p.version != generation
        and last_written.get(p.version, keep_after - timedelta(microseconds=1)) < keep_after
    )


def collect(store: BatchStore, now: datetime, grace: timedelta, dry_run: bool) -> dict[str, int]:
    """Find and (unless dry_run) delete the doomed partitions; counts per table."""
    partitions = [
        Partition(table, r.operation_id, r.day.date(), r.version)
        for table, day in VERSIONED_TABLES.items()
        for r in store.session.execute(
            f"SELECT DISTINCT operation_id, {day} AS day, version FROM {table}", timeout=120
        )
    ]
    pointed = {day: row.version for day, row in store.pointers().items()}
    folded = store.state().folded
    generation = folded.generation if folded else None
    last_written: dict[str, datetime] = {}
    for version, started in store.run_versions():
        at = started.replace(tzinfo=UTC)  # the driver returns naive UTC timestamps
        last_written[version] = max(at, last_written.get(version, at))
    victims = doomed(partitions, pointed, last_written, now, grace, generation)
    # The index rows of generations nothing serves any longer (a rebuild replaced them).
    index = [
        Partition(cql.RECEIPT_KEYS_BATCH_TABLE, r.operation_id, date.min, r.generation)
        for r in store.session.execute(
            f"SELECT DISTINCT generation, operation_id, vendor_fiscal_module, key_bucket "
            f"FROM {cql.RECEIPT_KEYS_BATCH_TABLE}",
            timeout=300,
        )
    ]
    old_generations = {p.version for p in doomed(index, {}, last_written, now, grace, generation)}
    if not dry_run:
        deletes = {
            table: cassandra_client.prepare_idempotent(
                store.session,
                f"DELETE FROM {table} WHERE operation_id = ? AND {day} = ? AND version = ?",
            )
            for table, day in VERSIONED_TABLES.items()
        }
        for p in victims:
            store.session.execute(deletes[p.table], (p.operation_id, p.day, p.version))
        drop = cassandra_client.prepare_idempotent(
            store.session,
            f"DELETE FROM {cql.RECEIPT_KEYS_BATCH_TABLE} WHERE generation = ? AND "
            "operation_id = ? AND vendor_fiscal_module = ? AND key_bucket = ?",
        )
        for r in store.session.execute(
            f"SELECT DISTINCT generation, operation_id, vendor_fiscal_module, key_bucket "
            f"FROM {cql.RECEIPT_KEYS_BATCH_TABLE}",
            timeout=300,
        ):
            if r.generation in old_generations:
                store.session.execute(
                    drop, (r.generation, r.operation_id, r.vendor_fiscal_module, r.key_bucket)
                )
    counts = {table: 0 for table in VERSIONED_TABLES}
    for p in victims:
        counts[p.table] += 1
    return {
        "partitions_seen": len(partitions),
        "versions_deleted": len({p.version for p in victims}),
        "index_generations_deleted": len(old_generations),
        **{f"{table}_partitions_deleted": n for table, n in counts.items()},
    }
