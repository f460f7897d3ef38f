"""History benchmark: one hourly batch run over 10,000 new receipts, whatever the history.

    python bench/batch_history.py [--sizes 1000000,10000000,50000000] [--new 10000]
                                  [--no-json]

Issue 46's "cost flat in the history", measured in one run with ratios:

(a) The time of one hourly run, `pos-batch run --start H --end H+1h` as a subprocess
    (a cold JVM, as a DAG task runs it), over the same-shaped `--new` receipts, with
    each `--sizes` receipts of history already archived and already folded by the batch
    layer. Goal: largest/smallest <= 1.2.
(b) Rows the run writes per new receipt (receipts_batch, agg_15m_batch, conflicts: the
    views, goal <= 2 without late data; and with receipt_keys_batch, the batch layer's
    natural-key index, beside them: rows counted before and after the run), and, on
    the smallest history, with late data: 5 % of the new receipts happened 30 hours
    earlier (the previous UTC day) and reach Kafka in the new hour.
(c) The run's non-write time (its wall clock less its Cassandra writes, the `save`
    jobs of its Spark event log) on the smallest history against the same work by a
    single-process reader of the same Delta table (delta-rs + polars, a cold process):
    read the new hour's master rows, parse the JSON, keep one copy per natural key (the
    lowest Kafka coordinates), aggregate per store and 15-minute window. Where the rest
    of the run's time goes (start-up, its Spark jobs, the driver between them) is
    reported from the same event log.

The state each run starts from is generated, not simulated receipt by receipt (Spark,
natively, in this process; generation time reported apart):

- History: `--new` receipts an hour going back from the new hour H (1M = 100 hours, 50M
  = 5,000 hours, ~208 days), 100 stores x 5 devices, receipt numbers sequential per
  device, Kafka partition = crc32 of the device's key % 4, offsets sequential per
  partition in archive order, record timestamps 2-4 s after the receipt. Every hour
  also carries a resend (an identical second copy, a higher offset) of 0.5 % of the
  previous hour's receipts, so copies cross hours and days. Appended to a Delta master
  dataset (`records.MASTER_COLUMNS`, partitioned by event_day, the change data feed on
  as `adapters.spark_session.build_session` makes it) 100 hours per table version, in time order.
- Folded by the batch layer: the index `receipt_keys_batch` (one row per natural key,
  the winning copy's `pos_lambda.views.winners.INDEX_COLUMNS`, by the project's own
  `pos_lambda.views.records.receipt_rows` over the typed receipts, so the content hash is the one
  the run computes: the JSON parse of `pos_lambda.views.records.check` is skipped, after checking
  on the first history hours that both give the very same rows); `receipts_batch` rows
  of the receipts of H's UTC day only (partition version = the generation,
  `master_version` = the table version that archived the record): the receipts of
  older days are not generated, since an hourly run neither reads nor writes them;
  `agg_15m_batch` of H's day and the day before it
  (`pos_lambda.views.batch.batch_aggregates` of their winners and duplicates, by
  `pos_lambda.views.winners.resolve`), a version per day; the pointer `batch_views`: a row per
  history day (covered until the next midnight, or until H for H's own day, as the
  previous hourly run leaves it), the horizon H, the generation, and the folded table
  version and id.
- Then the new hour is appended as ONE table version, and the run is timed.

Every run is checked: its exit code and JSON line, and the aggregates the pointer
serves for the days the new hour touched, against this script's own arithmetic of the
generator's formula (not read back from the code under test); the new receipts must be
in receipts_batch. An inexact run does not count. Each size gets its own keyspace and
data dir, dropped at the end. Writes docs/bench/batch_history.json (bench/results.py;
--no-json: don't). Needs `make up`, the `bench` extra (deltalake, polars) and ~1 GB of
disk per 10M records.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any

import results  # bench/, beside this script

NEW_HOUR = datetime(2026, 11, 2, 12, tzinfo=UTC)  # a Monday, midday: 48 windows of its day
GENERATION = "g0"
TOPIC = "pos.transactions"
FIRST_STORE = 101
CHUNK_HOURS = 100  # history hours per Delta table version (1M receipts at 10,000 an hour)
LATE_EVERY = 20  # with late data, every 20th new receipt (5 %) happened LATE_SHIFT earlier
LATE_SHIFT = timedelta(hours=30)
RESEND_DEVICE_EVERY = 10  # 1 device in 10 resends its last receipt of an hour: 0.5 %
WINDOW_S = 900
LATE_THRESHOLD_S = 900  # contract.LATE_THRESHOLD, restated: the arithmetic is independent
GOAL_SCALING = 1.2
GOAL_ROWS = 2.0
DEFAULT_SIZES = "1000000,10000000,50000000"
COUNTED_TABLES = ("receipts_batch", "agg_15m_batch", "conflicts", "receipt_keys_batch")
VIEW_TABLES = COUNTED_TABLES[:3]  # what readers see; the last is the batch layer's index
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"

Window = tuple[int, datetime]  # (operation_id, window_start UTC)
Measures = tuple[Any, ...]  # a store-window's numbers, in a fixed order


# --- the shape: pure arithmetic, shared by the generator and the checks --------------------


@dataclass(frozen=True)
class Receipt:
    operation_id: int
    vendor_fiscal_module: int
    transaction_id: int
    happened_at: datetime
    quantity: int
    cents: int  # unit price in cents; one line item
    kafka_timestamp: datetime
    kafka_partition: int
    kafka_offset: int

    @property
    def revenue(self) -> Decimal:
        return Decimal(self.cents * self.quantity) / 100

    @property
    def late(self) -> bool:
        return (self.kafka_timestamp - self.happened_at).total_seconds() > LATE_THRESHOLD_S

    @property
    def window(self) -> Window:
        epoch = int(self.happened_at.timestamp())  # whole seconds: micros never cross a window
        return self.operation_id, datetime.fromtimestamp(epoch - epoch % WINDOW_S, UTC)


@dataclass(frozen=True)
class Shape:
    """What the generator makes, as arithmetic: `history` receipts in the hours before
    `new_hour` (hour h = 0 .. hours-1 from `origin`), then `new` receipts in hour `hours`.

    Receipt g = h * new + j (j < new) is device d = j % devices's k-th receipt of hour h
    (k = j // devices): store FIRST_STORE + d // devices_per_store, device number
    1 + d % devices_per_store, receipt number h * per_device + k + 1, at second
    k * spacing + d % spacing of its hour plus (g % 997) ms, one line item of quantity
    1 + g % 3 at (100 + g % 400) cents, reaching Kafka 2 + g % 3 s later, on partition
    crc32("store:device") % partitions at offset h * per_hour(p) + k * devices_in(p) +
    the device's rank in p. Hour h >= 1 also carries an identical resend of hour h-1's
    last receipt (k = per_device - 1) of every RESEND_DEVICE_EVERY-th device, at
    offsets after the hour's receipts, reaching Kafka 60 + d % spacing s into hour h.
    `late`: every LATE_EVERY-th receipt of the new hour happened LATE_SHIFT earlier
    (same Kafka record timestamp, so it arrives ~30 h late).
    """

    history: int
    new: int = 10_000
    stores: int = 100
    devices_per_store: int = 5
    partitions: int = 4
    new_hour: datetime = NEW_HOUR
    late: bool = False

    def problems(self) -> list[str]:
        """Why this shape cannot be generated (empty: it can)."""
        out = []
        if self.new < self.devices or self.new % self.devices:
            out.append(f"--new {self.new:,} must be a positive multiple of the "
                       f"{self.devices} devices ({self.stores} stores x "
                       f"{self.devices_per_store})")  # fmt: skip
        elif 3600 // self.per_device < 1:
            out.append(f"--new {self.new:,}: more than one receipt per device per second")
        if self.history < self.new or self.history % self.new:
            out.append(f"history size {self.history:,} must be a positive multiple of "
                       f"--new {self.new:,} (whole hours)")  # fmt: skip
        return out

    @property
    def devices(self) -> int:
        return self.stores * self.devices_per_store

    @property
    def per_device(self) -> int:
        return self.new // self.devices

    @property
    def spacing(self) -> int:
        """Seconds between a device's receipts within an hour."""
        return 3600 // self.per_device

    @property
    def hours(self) -> int:
        return self.history // self.new

    @property
    def origin(self) -> datetime:
        return self.new_hour - timedelta(hours=self.hours)

    def device(self, d: int) -> tuple[int, int]:
        return FIRST_STORE + d // self.devices_per_store, 1 + d % self.devices_per_store

    @cached_property
    def partition_of(self) -> tuple[int, ...]:
        return tuple(
            zlib.crc32("{}:{}".format(*self.device(d)).encode()) % self.partitions
            for d in range(self.devices)
        )

    @cached_property
    def rank(self) -> tuple[int, ...]:
        """Each device's rank among the devices of its partition."""
        seen = [0] * self.partitions
        out = []
        for p in self.partition_of:
            out.append(seen[p])
            seen[p] += 1
        return tuple(out)

    @cached_property
    def resenders(self) -> tuple[int, ...]:
        return tuple(d for d in range(self.devices) if d % RESEND_DEVICE_EVERY == 0)

    @cached_property
    def resend_rank(self) -> tuple[int, ...]:
        """Each resending device's rank among the resenders of its partition (-1: none)."""
        seen = [0] * self.partitions
        out = [-1] * self.devices
        for d in self.resenders:
            out[d] = seen[self.partition_of[d]]
            seen[self.partition_of[d]] += 1
        return tuple(out)

    @cached_property
    def devices_in(self) -> tuple[int, ...]:
        return tuple(self.partition_of.count(p) for p in range(self.partitions))

    @cached_property
    def per_hour(self) -> tuple[int, ...]:
        """Offsets each partition takes per hour: its receipts, then its resends."""
        resends = [0] * self.partitions
        for d in self.resenders:
            resends[self.partition_of[d]] += 1
        return tuple(n * self.per_device + r for n, r in zip(self.devices_in, resends, strict=True))

    def is_late(self, h: int, j: int) -> bool:
        return self.late and h == self.hours and j % LATE_EVERY == 0

    def receipt(self, h: int, j: int) -> Receipt:
        """Receipt j of hour h, its first (winning) copy."""
        g, d, k = h * self.new + j, j % self.devices, j // self.devices
        op, vfm = self.device(d)
        p = self.partition_of[d]
        at = self.origin + timedelta(
            seconds=h * 3600 + k * self.spacing + d % self.spacing, milliseconds=g % 997
        )
        happened = at - LATE_SHIFT if self.is_late(h, j) else at
        return Receipt(
            op, vfm, h * self.per_device + k + 1, happened, 1 + g % 3, 100 + g % 400,
            at + timedelta(seconds=2 + g % 3), p,
            h * self.per_hour[p] + k * self.devices_in[p] + self.rank[d],
        )  # fmt: skip

    def resends(self, h: int) -> Iterator[tuple[Receipt, datetime, int]]:
        """The resends hour h carries: (the original, the copy's timestamp and offset)."""
        if h < 1:
            return
        for d in self.resenders:
            original = self.receipt(h - 1, (self.per_device - 1) * self.devices + d)
            p = self.partition_of[d]
            at = self.origin + timedelta(seconds=h * 3600 + 60 + d % self.spacing)
            offset = h * self.per_hour[p] + self.devices_in[p] * self.per_device
            yield original, at, offset + self.resend_rank[d]

    def hours_of(self, day: date) -> range:
        """The hours (indices, history and the new hour) whose receipts happen on `day`
        (before the late shift)."""
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        lo = int((start - self.origin).total_seconds()) // 3600
        return range(max(lo, 0), min(lo + 24, self.hours + 1))

    @property
    def day(self) -> date:
        """The new hour's UTC day."""
        return self.new_hour.date()

    @property
    def history_days(self) -> list[date]:
        first, last = self.origin.date(), (self.new_hour - timedelta(microseconds=1)).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]

    @property
    def aggregated_days(self) -> list[date]:
        """The days whose aggregates the state holds: H's day and the day before it."""
        return [d for d in (self.day - timedelta(days=1), self.day) if d in self.history_days]

    def touched_days(self) -> list[date]:
        """The days the new hour's receipts fall on."""
        days = {self.day}
        if self.late:
            days.add((self.new_hour - LATE_SHIFT).date())
        return sorted(days)


def expected(
    shape: Shape, days: Iterable[date], with_new_hour: bool = True
) -> dict[Window, Measures]:
    """Per store-window of `days`: (receipt_count, item_quantity, revenue, late_count,
    duplicates, conflicts, beyond_speed_bound) of every receipt the generator made
    there, in plain Python: the history's receipts, the new hour's (with_new_hour), and
    the resends archived so far (a resend counts in its original's window). The
    generator makes no conflict and nothing beyond the speed layer's 48 h bound."""
    wanted = set(days)
    last = shape.hours if with_new_hour else shape.hours - 1
    acc: dict[Window, list[Any]] = {}

    def add(r: Receipt, n: int, dup: int) -> None:
        if r.happened_at.date() not in wanted:
            return
        a = acc.setdefault(r.window, [0, 0, Decimal("0.00"), 0, 0])
        a[0] += n
        a[1] += r.quantity * n
        a[2] += r.revenue * n
        a[3] += int(r.late) * n
        a[4] += dup

    hours: set[int] = set()
    for day in wanted:
        hours.update(shape.hours_of(day))
        hours.update(h + 1 for h in shape.hours_of(day))  # their resends' hour
    if with_new_hour and shape.late:
        hours.add(shape.hours)
    for h in sorted(x for x in hours if 0 <= x <= last):
        for j in range(shape.new):
            add(shape.receipt(h, j), 1, 0)
        for original, _, _ in shape.resends(h):
            add(original, 0, 1)
    # An hour's receipts were added above only if the hour is in range; the resends of
    # an hour in range may live in the hour after it, added there (or not yet archived).
    return {w: (*a, 0, 0) for w, a in acc.items()}


def new_hour_receipts(shape: Shape) -> list[Receipt]:
    return [shape.receipt(shape.hours, j) for j in range(shape.new)]


# --- Spark: the generator -------------------------------------------------------------------


def _pick(values: Iterable[int], index: Any) -> Any:
    from pyspark.sql import functions as F

    return F.element_at(F.array(*(F.lit(v) for v in values)), (index + 1).cast("int"))


def master_rows(spark: Any, shape: Shape, lo: int, hi: int, resends: bool = True) -> Any:
    """Master-dataset rows (records.MASTER_COLUMNS) of hours [lo, hi): their receipts'
    first copies and (resends) the resends those hours carry, exactly as `Shape` says."""
    return _records(copies(spark, shape, lo, hi, resends), shape)


def receipt_rows(spark: Any, shape: Shape, lo: int, hi: int, settings: Any,
                 resends: bool = True) -> Any:  # fmt: skip
    """The same copies as receipt rows (records.RECEIPT_ROW_COLUMNS), by the project's
    own `pos_lambda.views.records.receipt_rows` (content hash, day, late and beyond-bound flags as a
    batch run computes them) over the typed receipts the validator would have made of
    their JSON: the check's parse is skipped, which would cost the generator of 50M
    index rows most of its time (`same_as_judged` proves the two equal)."""
    from pyspark.sql import functions as F

    from pos_lambda.views import records

    rows = copies(spark, shape, lo, hi, resends)
    schema = records.RECEIPT_SCHEMA
    cents = F.col("g") % 400 + 100
    quantity = F.col("g") % 3 + 1
    price = cents.cast("decimal(12,2)") / 100
    receipt = F.struct(
        F.timestamp_micros("happened_us").alias("happened_at"),
        (F.lit(FIRST_STORE) + (F.col("d") / shape.devices_per_store).cast("long"))
        .alias("operation_id"),
        F.col("tid").alias("transaction_id"),
        (F.lit(1) + F.col("d") % shape.devices_per_store).alias("vendor_fiscal_module"),
        F.array(F.struct(F.lit("Item").alias("title"), price.alias("price"),
                         quantity.alias("amount"))).alias("line_items"),
        quantity.alias("item_quantity"),
        (price * quantity).alias("revenue"),
    ).cast(schema)  # fmt: skip
    checked = rows.select(
        F.lit(TOPIC).alias("kafka_topic"),
        F.col("p").cast("int").alias("kafka_partition"),
        F.col("offset").cast("long").alias("kafka_offset"),
        F.timestamp_micros("arrival_us").alias("kafka_timestamp"),
        F.lit(None).cast("string").alias("reason"),
        receipt.alias("receipt"),
    )
    return records.receipt_rows(checked, *thresholds(settings))


def thresholds(settings: Any) -> tuple[int, int]:
    return (LATE_THRESHOLD_S * 1_000_000,
            int(settings.speed.max_lateness_hours * 3600 * 1_000_000))  # fmt: skip


def judged_receipt_rows(master: Any, settings: Any) -> Any:
    """Master rows judged as a batch run judges them: `check` (the contract's validator,
    native path first) + `receipt_rows`."""
    from pos_lambda.views import records

    checked = records.check(records.from_archive(master), native_first=True)
    return records.receipt_rows(checked, *thresholds(settings))


def same_as_judged(spark: Any, shape: Shape, settings: Any) -> list[str]:
    """The typed receipt rows of the first history hour (and the hour after, with its
    resends) against the same master rows judged from their JSON: every column of every
    row must be equal."""
    hi = min(2, shape.hours + 1)
    typed = receipt_rows(spark, shape, 0, hi, settings)
    judged = judged_receipt_rows(master_rows(spark, shape, 0, hi), settings)
    extra, missing = typed.exceptAll(judged).count(), judged.exceptAll(typed).count()
    total = judged.count()
    if extra or missing or total != hi * shape.new + len(list(shape.resends(1))) * (hi - 1):
        return [f"typed receipt rows differ from the judged ones: {extra} extra, {missing} "
                f"missing of {total}"]  # fmt: skip
    return []


def copies(spark: Any, shape: Shape, lo: int, hi: int, resends: bool = True) -> Any:
    """(g, d, tid, happened_us, arrival_us, p, offset) of every copy of hours [lo, hi):
    g = the receipt (its content), d = its device."""
    from pyspark.sql import functions as F

    n, D, K, S = shape.new, shape.devices, shape.per_device, shape.spacing
    origin_us = int(shape.origin.timestamp()) * 1_000_000
    files = max(1, min(4, hi - lo))
    ids = spark.range(lo * n, hi * n, 1, files)
    h, j = F.expr(f"id div {n}"), F.col("id") % n
    d, k = j % D, F.expr(f"(id % {n}) div {D}")
    p = _pick(shape.partition_of, d)
    at = F.lit(origin_us) + (h * 3600 + k * S + d % S) * 1_000_000 + (F.col("id") % 997) * 1000
    late = (h == shape.hours) & (j % LATE_EVERY == 0) if shape.late else F.lit(False)
    shift = int(LATE_SHIFT.total_seconds()) * 1_000_000
    firsts = ids.select(
        F.col("id").alias("g"),
        d.alias("d"),
        (h * K + k + 1).alias("tid"),
        F.when(late, at - shift).otherwise(at).alias("happened_us"),
        (at + (2 + F.col("id") % 3) * 1_000_000).alias("arrival_us"),
        p.alias("p"),
        (h * _pick(shape.per_hour, p) + k * _pick(shape.devices_in, p) + _pick(shape.rank, d))
        .alias("offset"),
    )  # fmt: skip
    if not resends or hi <= max(lo, 1):
        return firsts
    m = len(shape.resenders)
    first = max(lo, 1)
    rs = spark.range(first * m, hi * m, 1, max(1, min(4, hi - first)))
    rh = F.expr(f"id div {m}")
    rd = _pick(shape.resenders, F.col("id") % m)
    og = (rh - 1) * n + (K - 1) * D + rd  # the original: hour h-1, k = K-1, device rd
    rp = _pick(shape.partition_of, rd)
    again = rs.select(
        og.alias("g"),
        rd.alias("d"),
        ((rh - 1) * K + K).alias("tid"),
        (F.lit(origin_us) + ((rh - 1) * 3600 + (K - 1) * S + rd % S) * 1_000_000
         + (og % 997) * 1000).alias("happened_us"),
        (F.lit(origin_us) + (rh * 3600 + 60 + rd % S) * 1_000_000).alias("arrival_us"),
        rp.alias("p"),
        (rh * _pick(shape.per_hour, rp) + _pick(shape.devices_in, rp) * K
         + _pick(shape.resend_rank, rd)).alias("offset"),
    )  # fmt: skip
    return firsts.unionByName(again)


def _records(rows: Any, shape: Shape) -> Any:
    """(g, d, tid, happened_us, arrival_us, p, offset) -> master rows: the producer's
    canonical JSON (the contract's field order, as the archiver stores it)."""
    from pyspark.sql import functions as F

    from pos_lambda.schemas import contract

    happened = F.timestamp_micros("happened_us")
    store = F.lit(FIRST_STORE) + (F.col("d") / shape.devices_per_store).cast("long")
    device = F.lit(1) + F.col("d") % shape.devices_per_store
    cents = F.col("g") % 400 + 100
    message = F.struct(
        F.date_format(happened, TIMESTAMP_FORMAT).alias("happened_at"),
        store.cast("long").alias("operation_id"),
        F.col("tid").cast("long").alias("transaction_id"),
        device.cast("long").alias("vendor_fiscal_module"),
        F.array(
            F.struct(
                F.lit("Item").alias("title"),
                F.format_string("%d.%02d", (cents / 100).cast("int"), cents % 100).alias("price"),
                (F.col("g") % 3 + 1).cast("long").alias("amount"),
            )
        ).alias(contract.LINE_ITEMS_JSON_NAME),
    )
    arrival = F.timestamp_micros("arrival_us")
    return rows.select(
        F.lit(TOPIC).alias("kafka_topic"),
        F.col("p").cast("int").alias("kafka_partition"),
        F.col("offset").cast("long").alias("kafka_offset"),
        arrival.alias("kafka_timestamp"),
        F.encode(F.concat_ws(":", store.cast("string"), device.cast("string")), "UTF-8")
        .alias("kafka_key"),
        F.encode(F.to_json(message), "UTF-8").alias("raw_value"),
        (arrival + F.expr("INTERVAL 1 SECOND")).alias("ingested_at"),
        F.to_date(happened).alias("event_day"),
    )  # fmt: skip


@dataclass
class Generated:
    """What the generator wrote, and how long each part took."""

    history_version: int
    table_id: str
    receipts_batch_rows: int
    aggregate_rows: dict[date, int]
    seconds: dict[str, float] = field(default_factory=dict)


def generate(spark: Any, shape: Shape, settings: Any) -> Generated:
    """The folded history: master dataset, index, H's day's receipts, two days of
    aggregates, the pointer (see the module's doc)."""
    from batch_recompute import append  # bench/: the master dataset's append, reused
    from pyspark.sql import functions as F

    from pos_lambda.adapters import cassandra, master_dataset
    from pos_lambda.schemas import cql
    from pos_lambda.views import records
    from pos_lambda.views.batch import batch_aggregates
    from pos_lambda.views.winners import INDEX_COLUMNS, resolve

    ks = settings.cassandra.keyspace
    seconds: dict[str, float] = {}
    chunks = [(lo, min(lo + CHUNK_HOURS, shape.hours)) for lo in range(0, shape.hours, CHUNK_HOURS)]

    t0 = time.perf_counter()
    if problems := same_as_judged(spark, shape, settings):
        raise SystemExit(f"the generator's receipt rows are not the batch job's: {problems}")
    seconds["typed_check"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for version, (lo, hi) in enumerate(chunks):
        append(master_rows(spark, shape, lo, hi), settings)
        got = master_dataset.latest_version(spark, settings)
        if got != version:
            raise SystemExit(f"expected table version {version} after chunk {lo}-{hi}, got {got}")
        print(f"  master dataset: hours {hi:,} of {shape.hours:,} (version {version})",
              end="\r", flush=True)  # fmt: skip
    seconds["master_dataset"] = time.perf_counter() - t0
    history_version = len(chunks) - 1
    table_id = master_dataset.table_id(spark, settings)
    print(f"  master dataset: {shape.history:,} receipts + resends in {len(chunks)} versions, "
          f"{seconds['master_dataset']:.0f} s" + " " * 20, flush=True)  # fmt: skip

    cassandra.await_tables(spark, ks, [cql.RECEIPT_KEYS_BATCH_TABLE, cql.RECEIPTS_BATCH_TABLE,
                                       cql.AGG_BATCH_TABLE])  # fmt: skip
    index_columns = ("generation", *INDEX_COLUMNS, "key_bucket")
    t0 = time.perf_counter()
    for lo, hi in chunks:
        keys = receipt_rows(spark, shape, lo, hi, settings, resends=False)
        keys = keys.withColumns({
            "generation": F.lit(GENERATION),
            "key_bucket": F.floor(F.col("transaction_id") / cql.KEY_BUCKET_SIZE).cast("long"),
        })  # fmt: skip
        cassandra.upsert(keys, ks, cql.RECEIPT_KEYS_BATCH_TABLE, index_columns)
        print(f"  index: hours {hi:,} of {shape.hours:,}", end="\r", flush=True)
    seconds["index"] = time.perf_counter() - t0
    print(f"  index: {shape.history:,} keys in {seconds['index']:.0f} s" + " " * 20, flush=True)

    # H's day's receipts, each with the table version that archived it.
    t0 = time.perf_counter()
    day_hours = [h for h in shape.hours_of(shape.day) if h < shape.hours]
    receipts_written = 0
    for version, (lo, hi) in enumerate(chunks):
        if not day_hours:
            break
        a, b = max(lo, day_hours[0]), min(hi, day_hours[-1] + 1)
        if a >= b:
            continue
        rows = receipt_rows(spark, shape, a, b, settings, resends=False)
        rows = rows.withColumns({"version": F.lit(GENERATION),
                                 "master_version": F.lit(version).cast("long")})  # fmt: skip
        cassandra.upsert(rows, ks, cql.RECEIPTS_BATCH_TABLE,
                         ("version", *records.RECEIPT_ROW_COLUMNS, "master_version"))  # fmt: skip
        receipts_written += (b - a) * shape.new

    # Two days' aggregates: every copy of their hours (and of the hour after, where
    # their last hour's resends are), resolved by the winner rule, kept by winner day.
    aggregate_rows: dict[date, int] = {}
    days = shape.aggregated_days
    if days:
        hours = sorted({h for day in days for h in shape.hours_of(day) if h < shape.hours})
        lo, hi = hours[0], min(hours[-1] + 2, shape.hours)
        resolution = resolve(receipt_rows(spark, shape, lo, hi, settings))
        winners = resolution.winners.where(F.col("day").isin(days))
        duplicates = resolution.duplicates.where(F.to_date("winner_happened_at").isin(days))
        aggregates = (
            batch_aggregates(winners, duplicates)
            .withColumn("version", F.concat(F.lit("h-"), F.col("day").cast("string")))
            .persist()
        )
        cassandra.upsert(aggregates, ks, cql.AGG_BATCH_TABLE)
        aggregate_rows = {r["day"]: int(r["count"]) for r in
                          aggregates.groupBy("day").count().collect()}  # fmt: skip
        aggregates.unpersist()
    write_pointer(settings, shape, history_version, table_id, aggregate_rows)
    seconds["views_and_pointer"] = time.perf_counter() - t0
    seconds["total"] = sum(seconds.values())
    return Generated(history_version, table_id, receipts_written, aggregate_rows, seconds)


def aggregate_version(day: date) -> str:
    return f"h-{day.isoformat()}"


def covered_until(shape: Shape, day: date) -> datetime:
    """What the previous hourly run leaves: the next midnight, or H for H's own day."""
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    return min(midnight, shape.new_hour)


def write_pointer(
    settings: Any, shape: Shape, history_version: int, table_id: str,
    aggregate_rows: dict[date, int],
) -> None:  # fmt: skip
    """The committed state: a pointer row per history day, and the statics."""
    from cassandra.concurrent import execute_concurrent_with_args

    from pos_lambda.adapters import cassandra_client
    from pos_lambda.schemas import cql

    cluster = cassandra_client.cluster(settings, writes=True)
    try:
        session = cluster.connect(settings.cassandra.keyspace)
        insert = session.prepare(
            f"INSERT INTO {cql.BATCH_POINTER_TABLE} (view_name, day, version, covered_until, "
            "run_id, delta_version, receipt_count, aggregate_rows, committed_at) "
            "VALUES ('batch', ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        run_id, now = uuid.uuid1(), datetime.now(UTC)
        rows = []
        for day in shape.history_days:
            hours = [h for h in shape.hours_of(day) if h < shape.hours]
            rows.append((day, aggregate_version(day), covered_until(shape, day), run_id,
                         history_version, len(hours) * shape.new,
                         aggregate_rows.get(day, 0), now))  # fmt: skip
        for ok, result in execute_concurrent_with_args(session, insert, rows, concurrency=32):
            if not ok:
                raise result
        session.execute(
            f"UPDATE {cql.BATCH_POINTER_TABLE} SET horizon = %s, commits = 1, generation = %s, "
            "folded_version = %s, folded_table = %s WHERE view_name = 'batch'",
            (shape.new_hour, GENERATION, history_version, table_id),
        )
    finally:
        cluster.shutdown()


# --- the measured run and its checks -------------------------------------------------------


def run_batch(settings: Any, shape: Shape, event_dir: Path) -> dict[str, Any]:
    """`pos-batch run` over the new hour in a process of its own (a cold JVM), with
    Spark's event log on; its wall clock, exit code, JSON line and event log."""
    start, end = shape.new_hour, shape.new_hour + timedelta(hours=1)
    event_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "POS_CASSANDRA_KEYSPACE": settings.cassandra.keyspace,
        "POS_DATA_DIR": str(settings.data_dir),
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.eventLog.enabled=true --conf "
        f"spark.eventLog.dir=file://{event_dir} pyspark-shell",
    }
    cmd = [sys.executable, "-m", "pos_lambda.batch_layer.cli", "run",
           "--start", start.isoformat(), "--end", end.isoformat()]  # fmt: skip
    began = time.time()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=results.PROJECT_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ended = time.time()
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{")), None)
    logs = sorted(event_dir.glob("*"))
    events = [json.loads(x) for x in logs[-1].read_text().splitlines()] if logs else []
    return {
        "seconds": wall,
        "exit_code": done.returncode,
        "result": json.loads(line) if line else None,
        "stderr_tail": done.stderr[-3000:] if done.returncode else "",
        "breakdown": breakdown(events, began * 1000, ended * 1000),
    }


def breakdown(events: list[dict[str, Any]], began_ms: float, ended_ms: float) -> dict[str, Any]:
    """Where a run's wall clock went, from its Spark event log (pure): start-up (process
    start to the application's start), its actions (root SQL executions: planning and
    their jobs) by name, the Cassandra writes among them (`save`: the connector's
    DataFrame writes), the driver's time outside any action (Python, CQL bookkeeping,
    the pointer's commit), and the end (last action to process exit)."""
    app_start = next((e["Timestamp"] for e in events
                      if e["Event"] == "SparkListenerApplicationStart"), None)  # fmt: skip
    started: dict[int, tuple[float, str]] = {}
    spans: list[tuple[float, float, str]] = []
    for e in events:
        kind = e["Event"].rsplit(".", 1)[-1]
        if (
            kind == "SparkListenerSQLExecutionStart"
            and e.get("rootExecutionId", e["executionId"]) == e["executionId"]
        ):
            started[e["executionId"]] = (e["time"], e.get("description", "?"))
        elif kind == "SparkListenerSQLExecutionEnd" and e["executionId"] in started:
            t, what = started.pop(e["executionId"])
            spans.append((t, e["time"], what.split(" at ")[0]))
        elif kind == "SparkListenerJobStart" and "spark.sql.execution.id" not in (
            e.get("Properties") or {}
        ):
            started[-1 - e["Job ID"]] = (e["Submission Time"], "job outside SQL")
        elif kind == "SparkListenerJobEnd" and -1 - e["Job ID"] in started:
            t, what = started.pop(-1 - e["Job ID"])
            spans.append((t, e["Completion Time"], what))
    spans.sort()
    by_action: dict[str, float] = {}
    for a, b, what in spans:
        by_action[what] = by_action.get(what, 0.0) + (b - a) / 1000
    busy = _union_ms([(a, b) for a, b, _ in spans]) / 1000
    write = _union_ms([(a, b) for a, b, what in spans if what == "save"]) / 1000
    wall = (ended_ms - began_ms) / 1000
    first = spans[0][0] if spans else None
    last = max(b for _, b, _ in spans) if spans else None
    return {
        "wall_s": round(wall, 3),
        "startup_s": None if app_start is None else round((app_start - began_ms) / 1000, 3),
        "to_first_action_s": None if first is None else round((first - began_ms) / 1000, 3),
        "actions": len(spans),
        "actions_s": round(busy, 3),
        "write_s": round(write, 3),
        "non_write_s": round(wall - write, 3),
        "driver_between_actions_s": None if first is None or last is None
        else round((last - first) / 1000 - busy, 3),
        "after_last_action_s": None if last is None else round((ended_ms - last) / 1000, 3),
        "actions_by_name_s": {k: round(v, 3) for k, v in
                              sorted(by_action.items(), key=lambda kv: -kv[1])},
    }  # fmt: skip


def _union_ms(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _session(settings: Any) -> tuple[Any, Any]:
    from pos_lambda.adapters import cassandra_client

    cluster = cassandra_client.cluster(settings, timeout=300)
    return cluster, cluster.connect(settings.cassandra.keyspace)


def count_rows(settings: Any, shape: Shape, generations: Iterable[str]) -> dict[str, int]:
    """Rows of the tables a run writes: whole tables, but for the index only the
    partitions of the new hour's receipts (the history's other keys are not touched)."""
    from cassandra.concurrent import execute_concurrent_with_args

    from pos_lambda.schemas import cql

    cluster, session = _session(settings)
    try:
        out = {t: int(session.execute(f"SELECT COUNT(*) FROM {t}", timeout=300).one()[0])
               for t in COUNTED_TABLES[:3]}  # fmt: skip
        parts = sorted({(gen, r.operation_id, r.vendor_fiscal_module,
                         r.transaction_id // cql.KEY_BUCKET_SIZE)
                        for r in new_hour_receipts(shape) for gen in generations})  # fmt: skip
        stmt = session.prepare(
            f"SELECT COUNT(*) FROM {cql.RECEIPT_KEYS_BATCH_TABLE} WHERE generation = ? AND "
            "operation_id = ? AND vendor_fiscal_module = ? AND key_bucket = ?"
        )
        keys = 0
        for ok, rows in execute_concurrent_with_args(session, stmt, parts, concurrency=32):
            if not ok:
                raise rows
            keys += int(rows.one()[0])
        out[cql.RECEIPT_KEYS_BATCH_TABLE] = keys
        return out
    finally:
        cluster.shutdown()


def reported_vs_counted(result: dict[str, Any] | None, counted: dict[str, int]) -> list[str]:
    """Where the run's own counts of rows written (its JSON line, when it has them)
    differ from the rows counted in the tables before and after it (pure)."""
    result = result or {}
    views = sum(counted[t] for t in COUNTED_TABLES[:3])
    pairs = (("view_rows_written", views), ("index_rows_written", counted[COUNTED_TABLES[3]]))
    return [f"{name} {result[name]:,} != {n:,} counted" for name, n in pairs
            if name in result and result[name] != n]  # fmt: skip


def pointer(settings: Any) -> tuple[dict[date, Any], Any]:
    """The batch pointer: its rows by day, and its static columns (first row)."""
    from pos_lambda.schemas import cql

    cluster, session = _session(settings)
    try:
        rows = session.execute(
            f"SELECT * FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = 'batch'"
        ).all()
        days = {r.day.date() if hasattr(r.day, "date") else r.day: r for r in rows
                if r.day is not None}  # fmt: skip
        return days, rows[0] if rows else None
    finally:
        cluster.shutdown()


def served(settings: Any, shape: Shape, days: list[date]) -> dict[Window, Measures]:
    """The batch aggregates the pointer serves for `days` (what readers follow)."""
    from cassandra.concurrent import execute_concurrent_with_args

    from pos_lambda.schemas import cql

    by_day, _ = pointer(settings)
    cluster, session = _session(settings)
    try:
        stmt = session.prepare(
            "SELECT operation_id, window_start, receipt_count, item_quantity, revenue, "
            f"late_count, duplicates, conflicts, beyond_speed_bound FROM {cql.AGG_BATCH_TABLE} "
            "WHERE operation_id = ? AND day = ? AND version = ?"
        )
        params = [(FIRST_STORE + s, day, by_day[day].version)
                  for day in days if day in by_day for s in range(shape.stores)]  # fmt: skip
        out: dict[Window, Measures] = {}
        for ok, rows in execute_concurrent_with_args(session, stmt, params, concurrency=32):
            if not ok:
                raise rows
            for r in rows:
                out[(r.operation_id, r.window_start.replace(tzinfo=UTC))] = (
                    r.receipt_count, r.item_quantity, Decimal(r.revenue), r.late_count,
                    r.duplicates, r.conflicts, r.beyond_speed_bound,
                )  # fmt: skip
        return out
    finally:
        cluster.shutdown()


def served_new_receipts(settings: Any, shape: Shape) -> int:
    """The new hour's receipts readers see in receipts_batch: rows of the pointer's
    generation whose master_version the day's delta_version covers."""
    from cassandra.concurrent import execute_concurrent_with_args

    from pos_lambda.schemas import cql

    by_day, statics = pointer(settings)
    generation = statics.generation if statics is not None else GENERATION
    wanted = {(r.operation_id, r.vendor_fiscal_module, r.transaction_id)
              for r in new_hour_receipts(shape)}  # fmt: skip
    cluster, session = _session(settings)
    try:
        stmt = session.prepare(
            "SELECT vendor_fiscal_module, transaction_id, master_version FROM "
            f"{cql.RECEIPTS_BATCH_TABLE} WHERE operation_id = ? AND day = ? AND version = ?"
        )
        days = [d for d in shape.touched_days() if d in by_day]
        params = [(FIRST_STORE + s, day, generation) for day in days for s in range(shape.stores)]
        seen = 0
        for (op, day, _), (ok, rows) in zip(
            params, execute_concurrent_with_args(session, stmt, params, concurrency=32),
            strict=True,
        ):  # fmt: skip
            if not ok:
                raise rows
            limit = by_day[day].delta_version
            for r in rows:
                visible = r.master_version is None or r.master_version <= limit
                if visible and (op, r.vendor_fiscal_module, r.transaction_id) in wanted:
                    seen += 1
        return seen
    finally:
        cluster.shutdown()


def differences(want: dict[Window, Measures], got: dict[Window, Measures]) -> list[str]:
    """What differs between expected and served aggregates (pure)."""
    wrong = sorted(w for w in set(want) | set(got) if want.get(w) != got.get(w))
    if not wrong:
        return []
    w = wrong[0]
    return [f"{len(wrong)} of {len(want)} store-windows differ, e.g. store {w[0]} "
            f"{w[1]}: served {got.get(w)} != generated {want.get(w)}"]  # fmt: skip


def check_state(settings: Any, shape: Shape) -> list[str]:
    """The generated aggregates before the run, against the arithmetic."""
    days = shape.aggregated_days
    return differences(expected(shape, days, with_new_hour=False), served(settings, shape, days))


def check_run(settings: Any, shape: Shape, run: dict[str, Any]) -> list[str]:
    """Why a run does not count (empty: exact)."""
    problems = []
    if run["exit_code"] != 0:
        return [f"pos-batch run exited {run['exit_code']}: {run['stderr_tail'][-1500:]}"]
    result = run["result"] or {}
    expect = {"conflicts": 0, "beyond_speed_bound": 0}
    for name, value in expect.items():
        if name in result and result[name] != value:
            problems.append(f"run result {name} = {result[name]}, expected {value}")
    days = sorted(set(shape.touched_days()) | {shape.day})
    want = expected(shape, days)
    problems += differences(want, served(settings, shape, days))
    seen = served_new_receipts(settings, shape)
    if seen != shape.new:
        problems.append(f"{seen:,} of the {shape.new:,} new receipts are served in receipts_batch")
    return problems


# --- the floor: a single-process reader of the same Delta table -----------------------------


def floor_work(table: str, after: int, upto: int) -> dict[Window, Measures]:
    """The run's work without Spark or writes: the records of table versions (after,
    upto] (delta-rs's change data feed), JSON parsed, one copy per natural key (the
    lowest Kafka coordinates), aggregated per store and 15-minute window (polars)."""
    import polars as pl
    from deltalake import DeltaTable

    from pos_lambda.schemas import contract

    cdf = DeltaTable(table).load_cdf(starting_version=after + 1, ending_version=upto,
                                     columns=["kafka_partition", "kafka_offset",
                                              "kafka_timestamp", "raw_value"])  # fmt: skip
    rows = pl.DataFrame(cdf.read_all())  # an Arrow stream (arro3): no copy through pandas
    item = pl.Struct({"title": pl.String, "price": pl.String, "amount": pl.Int64})
    message = pl.Struct({"happened_at": pl.String, "operation_id": pl.Int64,
                         "transaction_id": pl.Int64, "vendor_fiscal_module": pl.Int64,
                         contract.LINE_ITEMS_JSON_NAME: pl.List(item)})  # fmt: skip
    parsed = rows.select(
        "kafka_partition", "kafka_offset", "kafka_timestamp",
        pl.col("raw_value").cast(pl.String).str.json_decode(message).alias("m"),
    ).unnest("m")  # fmt: skip
    receipts = (
        parsed.sort("kafka_partition", "kafka_offset")
        .unique(
            subset=["operation_id", "vendor_fiscal_module", "transaction_id"],
            keep="first",
            maintain_order=True,
        )
        .with_columns(
            pl.col("happened_at").str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_zone="UTC")
        )
    )
    items = receipts.select(
        "operation_id", "happened_at", "kafka_timestamp",
        pl.col(contract.LINE_ITEMS_JSON_NAME),
    ).with_row_index("receipt").explode(contract.LINE_ITEMS_JSON_NAME).unnest(
        contract.LINE_ITEMS_JSON_NAME
    )  # fmt: skip
    per_receipt = items.group_by("receipt").agg(
        pl.first("operation_id"), pl.first("happened_at"), pl.first("kafka_timestamp"),
        pl.col("amount").sum().alias("quantity"),
        (pl.col("price").cast(pl.Decimal(12, 2)) * pl.col("amount")).sum().alias("revenue"),
    )  # fmt: skip
    window = pl.col("happened_at").dt.truncate("15m")
    late = (
        pl.col("kafka_timestamp").cast(pl.Datetime("us", "UTC")) - pl.col("happened_at")
    ) > pl.duration(seconds=LATE_THRESHOLD_S)
    agg = per_receipt.group_by("operation_id", window.alias("window_start")).agg(
        pl.len().alias("n"), pl.col("quantity").sum(), pl.col("revenue").sum(),
        late.sum().alias("late"),
    )  # fmt: skip
    return {
        (r["operation_id"], r["window_start"]): (r["n"], r["quantity"], r["revenue"], r["late"])
        for r in agg.iter_rows(named=True)
    }


def run_floor(table: Path, after: int, upto: int) -> dict[str, Any]:
    """`floor_work` in a cold process of its own (as the run's own JVM is cold): its wall
    clock, the work's own time, and its aggregates (for the check)."""
    with tempfile.TemporaryDirectory(prefix="pos-bench-history-floor-") as d:
        out = Path(d) / "floor.json"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--floor-of", f"{table},{after},{upto}",
                        "--floor-out", str(out)], check=True)  # fmt: skip
        wall = time.perf_counter() - t0
        doc = json.loads(out.read_text())
    return {"seconds": wall, "work_s": doc["work_s"], "aggregates": doc["aggregates"]}


def floor_main(spec: str, out: Path) -> None:
    table, after, upto = spec.rsplit(",", 2)
    t0 = time.perf_counter()
    aggs = floor_work(table, int(after), int(upto))
    work = time.perf_counter() - t0
    rows = [[op, ws.astimezone(UTC).isoformat(), *(str(x) for x in a)]
            for (op, ws), a in aggs.items()]  # fmt: skip
    out.write_text(json.dumps({"work_s": work, "aggregates": rows}))


def floor_expected(shape: Shape) -> dict[Window, Measures]:
    """What the floor must find (pure): the new table version's records, one per natural
    key, per store-window: the new hour's receipts, and the resends it carries, whose
    originals only the history has (the floor reads no history), as receipts of their
    own, with their own arrival."""
    from dataclasses import replace

    want: dict[Window, Measures] = {}
    copies = [*new_hour_receipts(shape),
              *(replace(r, kafka_timestamp=at, kafka_offset=offset)
                for r, at, offset in shape.resends(shape.hours))]  # fmt: skip
    for r in copies:
        a = want.get(r.window, (0, 0, Decimal("0.00"), 0))
        want[r.window] = (a[0] + 1, a[1] + r.quantity, a[2] + r.revenue, a[3] + int(r.late))
    return want


def floor_differences(shape: Shape, rows: list[list[Any]]) -> list[str]:
    """The floor's aggregates against the arithmetic."""
    want = floor_expected(shape)
    got = {(int(op), datetime.fromisoformat(ws)): (int(n), int(q), Decimal(v), int(late))
           for op, ws, n, q, v, late in rows}  # fmt: skip
    return differences(want, got)


# --- one measurement ---------------------------------------------------------------------


def drop_keyspace(settings: Any, keyspace: str) -> None:
    from pos_lambda.adapters import cassandra_client

    cluster = cassandra_client.cluster(settings, timeout=120)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    finally:
        cluster.shutdown()


def measure(
    spark: Any, base: Any, shape: Shape, floor: bool, tmp: Path, keep_events: Path | None = None
) -> dict[str, Any]:
    """Generate the state of one shape, run the hour, check and count: one `runs` row."""
    from speed_constant_cost import compactions_idle  # bench/: awaits Cassandra's compactions

    from pos_lambda.adapters import master_dataset, schema_apply

    label = f"{shape.history:,} history" + (", late data" if shape.late else "")
    ks = f"bench_hist_{uuid.uuid4().hex[:8]}"
    settings = base.with_overrides(**{"cassandra_keyspace": ks,
                                       "data_dir": tmp / ks})  # fmt: skip
    schema_apply.apply_cql(settings)
    row: dict[str, Any] = {"history": shape.history, "new": shape.new, "late": shape.late,
                           "keyspace": ks, "new_hour": shape.new_hour.isoformat()}  # fmt: skip
    try:
        print(f"{label}: generating ({shape.hours:,} hours from {shape.origin:%Y-%m-%d %H:%M})",
              flush=True)  # fmt: skip
        gen = generate(spark, shape, settings)
        row["generation_s"] = {k: round(v, 1) for k, v in gen.seconds.items()}
        row["state_problems"] = check_state(settings, shape)
        if row["state_problems"]:
            raise SystemExit(f"{label}: the generated state is wrong: {row['state_problems']}")
        t0 = time.perf_counter()
        from batch_recompute import append

        append(master_rows(spark, shape, shape.hours, shape.hours + 1), settings)
        row["append_s"] = round(time.perf_counter() - t0, 1)
        upto = master_dataset.latest_version(spark, settings)
        assert upto == gen.history_version + 1, (upto, gen.history_version)
        row["compactions_idle_before"] = compactions_idle(settings, timeout=900)
        before = count_rows(settings, shape, [GENERATION])
        row["code"] = code_fingerprint()
        run = run_batch(settings, shape, tmp / f"{ks}-events")
        if code_fingerprint() != row["code"]:
            row["code"] += " (changed during the run)"
        row["problems"] = check_run(settings, shape, run)
        _, statics = pointer(settings)
        gens = {GENERATION, getattr(statics, "generation", None) or GENERATION}
        after = count_rows(settings, shape, sorted(gens))
        row.update(run_s=round(run["seconds"], 2), exit_code=run["exit_code"],
                   result=run["result"], breakdown=run["breakdown"])  # fmt: skip
        if run["stderr_tail"]:
            row["stderr_tail"] = run["stderr_tail"]
        row["rows_written"] = {t: after[t] - before[t] for t in COUNTED_TABLES}
        row["rows_per_receipt"] = sum(row["rows_written"].values()) / shape.new
        row["count_mismatch"] = reported_vs_counted(run["result"], row["rows_written"])
        if row["count_mismatch"]:
            print(f"  the run reports other row counts: {row['count_mismatch']}", flush=True)
        row["exact"] = not row["problems"]
        verdict = "exact" if row["exact"] else f"NOT EXACT: {row['problems']}"
        print(f"{label}: hourly run {run['seconds']:.1f} s ({verdict}); rows written "
              f"{row['rows_written']} = {row['rows_per_receipt']:.2f} per new receipt; "
              f"non-write {run['breakdown']['non_write_s']:.1f} s", flush=True)  # fmt: skip
        print(f"  where it went: {json.dumps(run['breakdown'])}", flush=True)
        if floor:
            f = run_floor(settings.master_dataset_dir, gen.history_version, upto)
            row["floor"] = {"seconds": round(f["seconds"], 3), "work_s": round(f["work_s"], 3),
                            "problems": floor_differences(shape, f["aggregates"])}  # fmt: skip
            print(f"{label}: floor (delta-rs + polars, cold process) {f['seconds']:.2f} s "
                  f"(work {f['work_s']:.2f} s; "
                  f"{'exact' if not row['floor']['problems'] else row['floor']['problems']})",
                  flush=True)  # fmt: skip
    finally:
        drop_keyspace(base, ks)
        shutil.rmtree(settings.data_dir, ignore_errors=True)
        if keep_events is not None and (tmp / f"{ks}-events").exists():
            keep_events.mkdir(parents=True, exist_ok=True)
            for log in (tmp / f"{ks}-events").iterdir():
                shutil.copy(log, keep_events / f"{shape.history}{'-late' if shape.late else ''}"
                            f"-{log.name}")  # fmt: skip
        shutil.rmtree(tmp / f"{ks}-events", ignore_errors=True)
    return row


# --- figures and the command line -----------------------------------------------------------


CODE_DIRS = ("adapters", "batch_layer", "infra", "schemas", "views")


def code_fingerprint() -> str:
    """A hash of the pipeline's Python sources as they are now: the checkout is shared,
    and a run compared with another must have run the same code."""
    import hashlib

    digest = hashlib.sha256()
    for d in CODE_DIRS:
        for path in sorted((results.PROJECT_ROOT / d).rglob("*.py")):
            digest.update(str(path.relative_to(results.PROJECT_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def figures(runs: list[dict[str, Any]]) -> list[results.Figure]:
    """The report's figures from the runs (pure): the scaling first (the headline).
    Sizes are compared only between runs of the same code (`code`)."""
    plain = sorted((r for r in runs if not r["late"] and r.get("exact")),
                   key=lambda r: r["history"])  # fmt: skip
    late = [r for r in runs if r["late"] and r.get("exact")]
    out: list[results.Figure] = []
    if len(plain) > 1:
        lo = plain[0]
        for hi in [r for r in plain[1:] if r.get("code") == lo.get("code")][::-1]:
            out.append(results.vs_peer(
                f"hourly run, {hi['history']:,} records of history", hi["run_s"], "s",
                f"the same hour, {lo['history']:,} records of history", lo["run_s"],
                results.Goal("<=", GOAL_SCALING, "issue 46: cost flat in the history"),
            ))  # fmt: skip
    for r in plain[:1] + late[:1]:
        kind = "with 5 % late data" if r["late"] else "no late data"
        # The views' rows (what readers switch to) hold the goal; the natural-key index's
        # one row per new receipt is the batch layer's own state, reported beside them.
        views = sum(n for table, n in r["rows_written"].items() if table in VIEW_TABLES)
        out.append(results.vs_floor(
            f"view rows written by the hourly run ({kind}, {r['history']:,} history)",
            views, "rows", "new receipts", r["new"],
            results.Goal("<=", GOAL_ROWS, "issue 46: rows per new receipt") if not r["late"]
            else None,
        ))  # fmt: skip
        out.append(results.vs_floor(
            f"all rows written, the index's included ({kind}, {r['history']:,} history)",
            sum(r["rows_written"].values()), "rows", "new receipts", r["new"],
        ))  # fmt: skip
    with_floor = [r for r in plain if "floor" in r and not r["floor"]["problems"]]
    for r in with_floor[:1]:
        out.append(results.vs_floor(
            f"hourly run's non-write time, {r['history']:,} history",
            r["breakdown"]["non_write_s"], "s",
            "delta-rs + polars, same read-parse-dedup-aggregate (cold process)",
            r["floor"]["seconds"],
        ))  # fmt: skip
    for r in plain:
        out.append(results.baseline(f"hourly run, {r['history']:,} history", r["run_s"], "s"))
    for r in runs:
        if "generation_s" in r:
            kind = ", late-data hour" if r["late"] else ""
            out.append(results.baseline(f"generating {r['history']:,} history{kind}",
                                        r["generation_s"]["total"], "s"))  # fmt: skip
    return out


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"records of history per run (default {DEFAULT_SIZES}); the "
                        "smallest also gets the late-data run and the floor")  # fmt: skip
    parser.add_argument("--new", type=int, default=10_000,
                        help="receipts of the new hour (and of every history hour)")  # fmt: skip
    parser.add_argument("--no-late", action="store_true", help="skip the late-data run")
    parser.add_argument("--event-logs", type=Path, metavar="DIR",
                        help="keep each run's Spark event log in DIR (its plans and "
                        "timings: what a slow run spent its time on)")  # fmt: skip
    parser.add_argument("--floor-of", help=argparse.SUPPRESS)  # internal: the floor process
    parser.add_argument("--floor-out", type=Path, help=argparse.SUPPRESS)
    results.add_json_argument(parser, "batch_history")
    args = parser.parse_args(argv)
    if args.floor_of:
        return parser, args
    try:
        args.size_list = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: comma-separated whole numbers please")
    if not args.size_list:
        parser.error("--sizes names no history size")
    for n in args.size_list:
        for problem in Shape(n, args.new).problems():
            parser.error(problem)
    return parser, args


def main(argv: list[str] | None = None) -> None:
    _, args = parse_args(argv)
    if args.floor_of:
        floor_main(args.floor_of, args.floor_out)
        return
    from pos_lambda.adapters.spark_session import build_session
    from pos_lambda.settings import load_settings

    base = load_settings()
    # The generator writes tens of millions of index rows: more writes in flight.
    gen_settings = base.with_overrides(**{"cassandra_concurrent_writes": 128})
    tmp = Path(tempfile.mkdtemp(prefix="pos-bench-history-"))
    spark = build_session(gen_settings, "pos-bench-batch-history")
    plan = [Shape(n, args.new) for n in args.size_list]
    if not args.no_late:
        plan.insert(1, Shape(args.size_list[0], args.new, late=True))
    runs: list[dict[str, Any]] = []
    try:
        for i, shape in enumerate(plan):
            runs.append(measure(spark, base, shape, i == 0, tmp, args.event_logs))
            if runs[-1].get("code") != runs[0].get("code"):
                print(f"WARNING: the pipeline's code changed since the first run "
                      f"({runs[0].get('code')} -> {runs[-1].get('code')}): sizes of "
                      "different code are not compared", flush=True)  # fmt: skip
            write(args, runs)  # after every size: a long run leaves what it measured
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    summary(runs)
    if not all(r.get("exact") for r in runs):
        sys.exit("some runs were not exact: see above")


def write(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    exact = all(r.get("exact") for r in runs)
    results.write(
        args, "batch_history", figures(runs), runs,
        notes=f"`pos-batch run` over one hour ({args.new:,} new receipts, 0.5 % resends of the "
        "previous hour) in a process of its own, on generated history already archived and "
        "folded (index, the hour's day's receipts, two days' aggregates, pointer); rows "
        "written counted per table before/after; non-write time = wall clock less the "
        "run's Cassandra `save` jobs (its Spark event log); floor: delta-rs + polars in a "
        "cold process over the same new table version; every run checked against the "
        "generator's arithmetic" + ("" if exact else "; SOME RUNS NOT EXACT"),
    )  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> None:
    print("\n| history | late data | hourly run s | non-write s | rows written per new receipt "
          "| generation s |\n|---:|---|---:|---:|---:|---:|")  # fmt: skip
    for r in runs:
        non_write = r.get("breakdown", {}).get("non_write_s", 0)
        generation = r.get("generation_s", {}).get("total", 0)
        late = "yes" if r["late"] else "no"
        print(f"| {r['history']:,} | {late} | {r.get('run_s', 0):.1f} | {non_write:.1f} | "
              f"{r.get('rows_per_receipt', 0):.2f} | {generation:.0f} |")  # fmt: skip
    for f in figures(runs):
        if f.ratio is not None:
            goal = (
                ""
                if f.goal is None
                else (
                    f" (goal {f.goal.op} {f.goal.ratio}: "
                    f"{'met' if f.goal.met(f.ratio) else 'NOT met'})"
                )
            )
            print(f"{f.name} / {f.reference}: {f.ratio:.2f}{goal}")


if __name__ == "__main__":
    main()
