"""Where one views micro-batch spends its time: a breakdown per stage.

    python -m bench.speed_breakdown --topic T [--repeat 2] [--native-first]

Reads topic T (e.g. the one bench/speed_vs_plain.py filled; see --help of that
script, or produce one with `pos-producer simulate`) as one batch, the same columns
the streaming source gives `foreachBatch`, and runs the views job's own micro-batch
(`pos_lambda.speed_layer.views_batch.ViewsBatch.process`) into a fresh keyspace with every stage
forced and timed on its own: Kafka read, validation (the contract's validator in an
Arrow-optimised Python UDF; with --native-first, Spark's own expressions first, as
the views query validates a backlog), the counts, each write, the stored-row reads
(receipt_keys by receipt, then the touched store-days' window rows) and the dedup
(winner rule; its lazy local checkpoint forced here). Forcing a stage adds a Spark
job or two the plain micro-batch does not run (and a stage's time includes its
inputs' reads unless they were cached), so the sum exceeds one plain micro-batch
somewhat; the shares are the point. `--repeat` runs it again into another fresh
keyspace in the same session (warm JVM). Drops its keyspaces.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from bench import harness
from pos_lambda.adapters import schema_apply
from pos_lambda.settings import Settings, load_settings

Timings = dict[str, float]


def _timed(timings: Timings, stage: str, fn: Callable[[], Any]) -> Any:
    seconds, out = harness.timed(fn)
    timings[stage] = timings.get(stage, 0.0) + seconds
    return out


def one_round(
    spark: Any, settings: Settings, keyspace: str, native_first: bool = False
) -> tuple[int, float, Any, Timings]:
    """One micro-batch of the whole topic into `keyspace`, every stage timed."""
    from pyspark.sql import DataFrame

    from pos_lambda.adapters import cassandra
    from pos_lambda.adapters.view_store import ConnectorStore
    from pos_lambda.schemas import contract, cql
    from pos_lambda.speed_layer import views_batch
    from pos_lambda.speed_layer.batch_plan import Route, Thresholds
    from pos_lambda.views import records

    t: Timings = {}

    class Timed(ConnectorStore):
        def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
            rows = super().lookup(table, keys, columns).persist()
            _timed(t, f"read stored rows: {table}", rows.count)
            return rows

        def upsert_each(
            self, df: DataFrame, targets: Any, written: Any = lambda table: None
        ) -> None:
            write = super().upsert_each
            for target in targets:  # each table's write timed by itself
                _timed(t, f"write {target.table}", partial(write, df, (target,), written))

    # The connector's paths only: the driver's serve small micro-batches, not this one.
    job = views_batch.ViewsBatch(
        store=Timed(spark, keyspace),
        late_threshold_us=int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
        max_lateness_us=int(settings.speed.max_lateness_hours * 3600 * 1_000_000),
        limits=Thresholds(
            driver_reads_below=0,
            driver_writes_below=0,
            bucket_reads_from=settings.speed.bucket_reads_from,
            native_check_from=settings.speed.native_check_from,
        ),
    )
    cassandra.await_tables(spark, keyspace, [cql.RAW_TABLE, cql.AGG_SPEED_TABLE])
    reader = (
        spark.read.format("kafka")
        .options(**settings.spark_kafka_options)
        .option("subscribe", settings.topics.transactions)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", "earliest")
        .load()
    )
    # The shell calls the winner rule by its module-level name: timed by replacing it there.
    real_decide = getattr(views_batch, "decide_batch")  # noqa: B009

    def decide(incoming: DataFrame, stored: DataFrame) -> Any:
        resolution = real_decide(incoming, stored)
        plain = resolution.materialised

        def forced() -> Any:
            done = plain()
            done.ranked.count()  # the checkpoint is lazy: take it here, timed
            return done

        timed = partial(_timed, t, "dedup (winner rule, materialised)", forced)
        object.__setattr__(resolution, "materialised", timed)
        return resolution

    start = time.perf_counter()
    batch = reader.persist()
    n = _timed(t, "Kafka read", batch.count)
    checked = records.check(batch, native_first).persist()
    validation = "validation (native first)" if native_first else "validation (Python UDF)"
    _timed(t, validation, checked.count)
    setattr(views_batch, "decide_batch", decide)  # noqa: B010
    try:
        inner_start = time.perf_counter()
        counts = job._process_checked(checked, Route(native_first, collect_keys=False))
        inner = time.perf_counter() - inner_start
    finally:
        setattr(views_batch, "decide_batch", real_decide)  # noqa: B010
    total = time.perf_counter() - start
    checked.unpersist()
    batch.unpersist()
    accounted = sum(v for k, v in t.items() if k not in ("Kafka read", validation))
    t["counts and other jobs (rest of the batch)"] = inner - accounted
    return n, total, counts, t


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--native-first",
        action="store_true",
        help="validate natively in Spark first (as after a large micro-batch)",
    )
    args = parser.parse_args()

    from pos_lambda.adapters.spark_session import build_session

    settings = load_settings().with_overrides(**{"topic_transactions": args.topic})
    spark = build_session(settings, "pos-speed-breakdown")
    keyspaces = []
    try:
        for rnd in range(args.repeat):
            ks = f"bench_brk_{uuid.uuid4().hex[:6]}"
            keyspaces.append(ks)
            schema_apply.apply_cql(settings, ks)
            n, total, counts, t = one_round(spark, settings, ks, args.native_first)
            print(f"\nround {rnd + 1}: {n} messages, {total:.2f} s ({n / total:,.0f} events/s); "
                  f"{counts}")  # fmt: skip
            print("| stage | s | share |\n|---|---:|---:|")
            for stage, secs in t.items():
                print(f"| {stage} | {secs:.2f} | {secs / total:.0%} |")
    finally:
        spark.stop()
        harness.drop(settings, keyspaces)


if __name__ == "__main__":
    main()
