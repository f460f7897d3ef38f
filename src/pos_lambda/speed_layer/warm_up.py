"""Pay a driver's cold start before the first record is due: warm-up micro-batches.

A fresh driver JVM runs its first micro-batches many times slower than later ones:
classes load, Spark generates and compiles the plans' code, the JIT compiles the hot
paths, the Python worker daemon starts, the CQL sessions prepare their statements.
Measured on 2 cores: a views micro-batch of <= 10 rows took 3.5 s first, 0.56 s warm,
and the archiver's first Delta commit 23.7 s, beside the views driver's own cold start.

So each driver, before its streaming query starts, runs the work of a micro-batch on
synthetic records of its own, through the same code:

- the views driver: `ViewsBatch.process` on a few receipts (new winners, a resend, a
  conflict, a malformed record) with the real stores, into a scratch keyspace
  (POS_SPEED_WARM_UP_KEYSPACE, created if missing), on each route a micro-batch takes:
  a backlog's (the connector's reads and the native check) once, then a small one's
  (the driver's reads and writes) several times. Its receipts get new transaction ids
  each time, so every pass takes the path of new receipts.
- the archiver: the same rows through `records.archive_rows` into a scratch Delta table
  under the data dir, removed afterwards.

Nothing reaches the pipeline's topics, tables or master dataset. `pos-speed run` reports
itself ready once every driver has warmed up and started its query
(`pos_lambda.speed_layer.supervisor`). A standby driver (POS_SPEED_STANDBY) warms up the
same way before it stands by, and stops between passes once told to take over. The
synthetic records are pure data (`synthetic_records`), unit-tested; the passes run
against the real services (tests/integration/test_speed_layer.py).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

log = logging.getLogger("pos.speed")

# Kafka's record columns as the source gives them (the jobs read these).
KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)
WARM_UP_TOPIC = "pos.warm-up"  # named in the synthetic records only: never produced to
STORES = (900_001, 900_002)  # store ids no simulation uses (the simulator's start at 1)


@dataclass(frozen=True)
class Pass:
    """One warm-up pass: what it ran and how long it took."""

    name: str
    seconds: float


def _receipt(operation_id: int, transaction_id: int, at: datetime, price: str) -> bytes:
    return json.dumps(
        {
            "happened_at": at.isoformat(),
            "operation_id": operation_id,
            "transaction_id": transaction_id,
            "vendor_fiscal_module": 1,
            "transactions": [{"title": "Warm-up", "price": price, "amount": 1}],
        },
        separators=(",", ":"),
    ).encode()


def synthetic_records(now: datetime, first_id: int) -> list[tuple[Any, ...]]:
    """Kafka records (KAFKA_DDL) of one small micro-batch that takes every path of the
    views' decisions: four new receipts in two stores, one resend (the same value
    again), one conflict (the same key, other content) and one malformed value. Their
    transaction ids start at `first_id` (a new one per warm-up: new winners each time);
    they happened a minute before `now` and reached Kafka at `now`."""
    at = now - timedelta(minutes=1)
    receipts = [
        _receipt(STORES[i % 2], first_id + i, at + timedelta(seconds=i), "1.00") for i in range(4)
    ]
    values = [
        *receipts,
        receipts[0],  # a resend
        _receipt(STORES[1], first_id + 1, at + timedelta(seconds=1), "9.99"),  # a conflict
        b'{"happened_at": "not a time"',  # malformed
    ]
    return [
        (f"{STORES[0]}:1".encode(), value, WARM_UP_TOPIC, 0, offset, now)
        for offset, value in enumerate(values)
    ]


def _records(spark: Any, now: datetime) -> Any:
    # Milliseconds since the epoch, times 10: distinct per warm-up, whichever driver.
    first_id = int(now.timestamp() * 1000) * 10
    return spark.createDataFrame(synthetic_records(now, first_id), KAFKA_DDL)


def timed(name: str, work: Callable[[], object]) -> Pass:
    started = time.monotonic()
    work()
    return Pass(name, round(time.monotonic() - started, 3))


# Small passes after the first: the JIT compiles the hot paths over several micro-batches
# (passes of 1.89, 1.59 s after the first; a warm small micro-batch takes ~0.55 s), and a
# receipt of the first minute waits on whatever is left cold.
SMALL_PASSES = 6


def _never() -> bool:
    return False


def warm_views(
    spark: Any,
    process: Callable[[Any, bool, bool], object],
    cut_short: Callable[[], bool] = _never,
) -> list[Pass]:
    """Views passes through `process(batch, native_first, collect_keys)` (a ViewsBatch's,
    on the scratch keyspace): once as a backlog's micro-batch (the connector's reads, the
    native check first), then SMALL_PASSES times as a small one (the driver's reads and
    writes: the route of a running speed layer's micro-batches). No further pass once
    `cut_short()` says so: a standby told to take over (its replay does the rest)."""
    routes = [("backlog route", True, False)] + [
        (f"small route {n + 1}", False, True) for n in range(SMALL_PASSES)
    ]
    passes = []
    for name, native_first, collect_keys in routes:
        if cut_short():
            break
        batch = _records(spark, datetime.now(UTC))
        passes.append(timed(name, partial(process, batch, native_first, collect_keys)))
    return passes


def warm_archiver(spark: Any, scratch: Path, cut_short: Callable[[], bool] = _never) -> list[Pass]:
    """The archiver's write, twice, into a scratch Delta table at `scratch` (removed);
    no further write once `cut_short()` says so."""
    from pyspark.sql import functions as F

    from pos_lambda.views import records

    shutil.rmtree(scratch, ignore_errors=True)
    passes = []
    try:
        for name in ("first Delta commit", "second Delta commit"):
            if cut_short():
                break
            rows = records.archive_rows(_records(spark, datetime.now(UTC)), F.current_timestamp())

            def write(r: Any = rows) -> None:
                r.write.format("delta").mode("append").partitionBy("event_day").save(str(scratch))

            passes.append(timed(name, write))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return passes


def wanted(enabled: bool, available_now: bool, checkpoint: Path) -> bool:
    """Whether a driver warms up before its query starts: if enabled, on a continuous
    run, and not when resuming. A checkpoint that has committed a micro-batch means a
    restart (after a death, an outage, a deploy): the query's first micro-batch then
    takes what came meanwhile and does the warm-up's work on real records, and warming
    up first would only keep the views stale 15-40 s longer."""
    if not enabled or available_now:
        return False
    if resuming(checkpoint):
        log.info("no warm-up: resuming from %s, whose replay does its work", checkpoint)
        return False
    return True


def resuming(checkpoint: Path) -> bool:
    """Whether the streaming query's checkpoint has committed a micro-batch."""
    try:
        return any(
            p.name.isascii() and p.name.isdigit() for p in (checkpoint / "commits").iterdir()
        )
    except (FileNotFoundError, NotADirectoryError):
        return False


def report(query: str, passes: list[Pass]) -> str:
    """One log line: each pass's time."""
    parts = ", ".join(f"{p.name} {p.seconds:.2f} s" for p in passes)
    total = sum(p.seconds for p in passes)
    return f"{query} warmed up in {total:.1f} s on synthetic records ({parts})"
