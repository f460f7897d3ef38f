"""What a views micro-batch decides before any I/O: the keys of the stored rows it
needs, and which path its reads and writes take. Pure: plain values in, plain values
out (and Column expressions, which are unresolved and touch no data).

The paths (measured: docs/speed-performance.md):
- reads of the stored rows (`receipt_keys` by receipt, `agg_15m_speed` by store-day):
  by the driver's CQL session when the micro-batch's keys were collected and it is
  small (`driver_reads_below` valid records); else the connector's direct join, one
  read per receipt, or one per `receipt_keys` partition when the micro-batch brings
  many receipts per partition (a backlog: `bucket_reads_from` per key bucket);
- writes: by the driver's CQL session for a micro-batch of fewer than
  `driver_writes_below` Kafka records, else the connector's.
Whether a micro-batch validates natively first and collects its keys is decided before
it is read, from its expected size (`batch_size` in views_job: the checkpoint's offsets,
else the previous micro-batch's); its reads and writes, once its first Spark job counted
it. One function decides both (`route`): the driver reads only what it collected keys
for, and both sides of that bargain stand on one threshold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import cache
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from pos_lambda.schemas import cql
from pos_lambda.speed_layer.progress import BatchCounts
from pos_lambda.views import records
from pos_lambda.views.winners import INDEX_COLUMNS

# The raw table holds every receipt row column but these two.
RAW_COLUMNS = tuple(
    c for c in records.RECEIPT_ROW_COLUMNS if c not in ("content_hash", "beyond_bound")
)
KEY_BUCKET = "key_bucket"
# receipt_keys' columns: what the winner rule reads of a stored winner, not its content
# (line items, totals). Writing and reading back the content cost a 50k-receipt
# micro-batch ~3.8 s of connector work against ~1.8 s without it (scratch, warm).
KEY_COLUMNS = (*INDEX_COLUMNS, KEY_BUCKET)
# The primary keys the views read stored rows by: receipt_keys' (one receipt) and
# agg_15m_speed's partition key (a store-day's windows).
RECEIPT_KEY = ("operation_id", "vendor_fiscal_module", KEY_BUCKET, "transaction_id")
STORE_DAY = ("operation_id", "day")


def key_bucket(transaction_id: Column | None = None) -> Column:
    """The receipt_keys partition of a receipt number (see src/pos_lambda/schemas/cql.py)."""
    number = F.col("transaction_id") if transaction_id is None else transaction_id
    return F.floor(number / cql.KEY_BUCKET_SIZE).cast("long")


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def stats() -> tuple[Column, ...]:
    """Invalid and valid records, and (estimated) distinct receipt_keys partitions."""
    bucket = F.struct(
        F.col("receipt.operation_id"),
        F.col("receipt.vendor_fiscal_module"),
        key_bucket(F.col("receipt.transaction_id")),
    )
    return (
        F.count(F.when(~records.is_valid(), 1)).alias("invalid"),
        F.count(F.when(records.is_valid(), 1)).alias("valid"),
        F.approx_count_distinct(F.when(records.is_valid(), bucket)).alias("buckets"),
    )


@cache
def read_keys() -> tuple[Column, ...]:
    """Of every checked record: whether it is valid, and a valid one's RECEIPT_KEY and day."""

    def field(name: str) -> Column:
        return F.col(f"receipt.{name}").alias(name)

    return (
        records.is_valid().alias("valid"),
        field("operation_id"),
        field("vendor_fiscal_module"),
        key_bucket(F.col("receipt.transaction_id")).alias(KEY_BUCKET),
        field("transaction_id"),
        records.receipt_day().alias("day"),
    )


@dataclass(frozen=True)
class BatchKeys:
    """A micro-batch's records as its first Spark job collected them (`read_keys`): the
    counts, and the keys of the stored rows its receipts need, each once."""

    valid_rows: int
    invalid_rows: int
    receipts: tuple[tuple[Any, ...], ...]  # RECEIPT_KEY values
    store_days: tuple[tuple[Any, ...], ...]  # STORE_DAY values
    buckets: int  # receipt_keys partitions: (operation_id, vendor_fiscal_module, key_bucket)


def batch_keys(rows: Sequence[Sequence[Any]]) -> BatchKeys:
    """Collected `read_keys` rows (valid, operation_id, vendor_fiscal_module, key_bucket,
    transaction_id, day) as BatchKeys."""
    valid = [tuple(r[1:]) for r in rows if r[0]]
    receipts = sorted({r[:4] for r in valid})
    return BatchKeys(
        valid_rows=len(valid),
        invalid_rows=len(rows) - len(valid),
        receipts=tuple(receipts),
        store_days=tuple(sorted({(r[0], r[4]) for r in valid})),
        buckets=len({r[:3] for r in receipts}),
    )


@dataclass(frozen=True)
class Thresholds:
    """The micro-batch sizes at which the paths change (Settings.speed_*; 0 turns the
    driver's reads or writes off)."""

    # Valid records below which a micro-batch whose keys were collected reads its
    # stored rows by the driver (speed_driver_reads_below).
    driver_reads_below: int
    # Kafka records below which a micro-batch writes by the driver
    # (speed_driver_writes_below).
    driver_writes_below: int
    # Receipts per key bucket (on average) from which the connector reads whole
    # receipt_keys partitions (speed_bucket_reads_from).
    bucket_reads_from: float
    # Kafka records of the previous micro-batch from which validation is native first
    # (speed_native_check_from).
    native_check_from: int

    @property
    def uses_driver(self) -> bool:
        """Whether some micro-batch may read or write by the driver."""
        return self.driver_reads_below > 0 or self.driver_writes_below > 0


class Reads(Enum):
    """How a micro-batch reads its receipts' and store-days' stored rows."""

    DRIVER = "driver"  # the driver's CQL queries of the collected keys
    BY_RECEIPT = "by_receipt"  # the connector's direct join, one read per receipt
    BY_PARTITION = "by_partition"  # ... one read per receipt_keys partition


@dataclass(frozen=True)
class Counted:
    """What a micro-batch's first Spark job found, before any stored row is read."""

    counts: BatchCounts  # its valid and invalid records
    buckets: int  # its receipts' receipt_keys partitions (estimated unless keys collected)


@dataclass(frozen=True)
class Route:
    """A micro-batch's paths: how it is taken (decided before it is read) and, once it is
    counted, how its stored rows are read and its rows written."""

    native_first: bool  # validate natively first (records.check)
    collect_keys: bool  # its first Spark job collects the keys, for the driver's reads
    reads: Reads | None = None  # None until the micro-batch is counted
    driver_writes: bool = False

    @property
    def one_partition(self) -> bool:
        """The driver reads and writes it: its few winners are aggregated in one
        partition, with the stored windows (a local relation, broadcast), so without a
        shuffle: one Spark stage (and AQE plan) fewer. Not for a micro-batch the driver
        only reads for: its thousands of rows stay in the partitions they came in."""
        return self.reads is Reads.DRIVER and self.driver_writes


def route(limits: Thresholds, before: int | Route, counted: Counted | None = None) -> Route:
    """A micro-batch's route (pure), from what is known `before` it is read and, once its
    first Spark job `counted` it, from its counts (None: not yet, only how to take it).

    `before` is the Kafka records it is expected to hold (its own count, read from the
    checkpoint's offset log by `records_between`, or when that is unknown the previous
    micro-batch's: backlogs come in runs of micro-batches), or the route it was already
    taken on (a warm-up's chosen route, a test's).
    """
    if isinstance(before, Route):
        taken = Route(before.native_first, before.collect_keys)
    else:
        taken = Route(
            native_first=before >= limits.native_check_from,
            collect_keys=before < limits.driver_reads_below,
        )
    if counted is None:
        return taken
    valid = counted.counts.valid_rows
    # The driver reads only the keys it collected: a micro-batch expected large but
    # found small has none, and takes the connector's join.
    if taken.collect_keys and valid < limits.driver_reads_below:
        reads = Reads.DRIVER
    elif valid / max(counted.buckets, 1) < limits.bucket_reads_from:
        reads = Reads.BY_RECEIPT
    else:
        reads = Reads.BY_PARTITION
    records_in = valid + counted.counts.invalid_rows
    return replace(taken, reads=reads, driver_writes=records_in < limits.driver_writes_below)


# --- a micro-batch's size before it is read ------------------------------------------------


def logged_offsets(text: str) -> dict[str, dict[str, int]] | None:
    """The Kafka offsets (topic -> partition -> offset) a streaming checkpoint's log file
    records: `offsets/N` (a version line, the batch's metadata, then each source's end
    offsets: this query has one source) or `sources/0/0` (the source's starting offsets,
    after a zero byte Spark writes for old readers). None when it holds no such JSON."""
    lines = text.lstrip("\x00").strip().splitlines()
    if len(lines) < 2:
        return None
    try:
        found = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    if not isinstance(found, dict) or not all(isinstance(p, dict) for p in found.values()):
        return None
    return {t: {p: int(o) for p, o in parts.items()} for t, parts in found.items()}


def records_between(start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> int:
    """Kafka records from `start` to `end` offsets: an upper bound of what a micro-batch
    reads (transaction markers and aborted records take offsets too). A partition new at
    `end` counts from 0."""
    return sum(
        max(0, offset - start.get(topic, {}).get(partition, 0))
        for topic, parts in end.items()
        for partition, offset in parts.items()
    )
