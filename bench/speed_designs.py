"""Speed-layer designs measured side by side on the same Kafka topic, in one run.

    python bench/speed_designs.py [--count 30000] [--batch 1000]

(a) watermark + dropDuplicatesWithinWatermark + windowed aggregation on the RocksDB
    state store, append mode (Spark 3.5 requires it for chained stateful operators);
(b) the pipeline's foreachBatch design: upsert raw receipts, recompute the touched
    windows' absolute aggregates from the raw table (src/pos_lambda/speed_layer/views_job.py).

For each: backlog throughput (events/s from Kafka into Cassandra, available-now),
and how many 15-minute windows equal the producer's ledger afterwards. For (b)
also the latency from producing a receipt to seeing it in its window, with the
query running continuously (1 s trigger). Writes docs/bench/speed_designs.json
(bench/results.py; --no-json: don't). Needs `make up`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import results as bench_results  # bench/, beside this script
from cassandra.cluster import Cluster
from confluent_kafka import Producer
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pos_lambda.adapters import cassandra as cassandra_io
from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.kafka import read_transactions
from pos_lambda.adapters.service import wait_for
from pos_lambda.adapters.spark_session import build_session
from pos_lambda.producer import ledger
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, encode, simulate
from pos_lambda.schemas import contract
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings, load_settings
from pos_lambda.speed_layer import views_job
from pos_lambda.speed_layer.progress import ProgressRecorder
from pos_lambda.views import records as transforms

LATENCY_SAMPLES = 5  # receipts produced one at a time per design


def _stored(session: Any) -> dict[tuple[int, datetime], tuple[Any, ...]]:
    rows = session.execute(f"SELECT * FROM {tables.AGG_SPEED_TABLE}")
    return {
        (r.operation_id, r.window_start): (
            r.receipt_count,
            r.item_quantity,
            Decimal(r.revenue),
            r.late_count,
        )
        for r in rows
    }


def _fresh(settings: Settings, topic: str, tag: str) -> tuple[Settings, Any]:
    s = settings.with_overrides(**{
        "cassandra_keyspace": f"bench_{tag}_{uuid.uuid4().hex[:6]}",
        "topic_transactions": topic,
        "data_dir": Path(tempfile.mkdtemp(prefix=f"bench-{tag}-")),
    })  # fmt: skip
    schema_apply.apply_cql(s)
    cluster = Cluster(s.cassandra_contact_points, port=s.cassandra.port)
    return s, cluster.connect(s.cassandra.keyspace)


def design_a(spark: Any, settings: Settings, available_now: bool = True) -> Any:
    cassandra_io.await_tables(spark, settings.cassandra.keyspace, [tables.AGG_SPEED_TABLE])
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    checked = transforms.check(read_transactions(spark, settings))
    receipts = transforms.receipt_rows(checked, 900 * 10**6, 10**15).drop("beyond_bound")
    aggregates = (
        receipts.withWatermark("happened_at", "10 minutes")
        .dropDuplicatesWithinWatermark(list(contract.NATURAL_KEY))
        .groupBy("operation_id", F.window("happened_at", "15 minutes"))
        .agg(
            F.count(F.lit(1)).cast("int").alias("receipt_count"),
            F.sum("item_quantity").cast("long").alias("item_quantity"),
            F.sum("revenue").alias("revenue"),
            F.sum(F.col("late").cast("int")).cast("int").alias("late_count"),
        )
        .select(
            "operation_id",
            F.to_date(F.col("window.start")).alias("day"),
            F.col("window.start").alias("window_start"),
            "receipt_count", "item_quantity", "revenue", "late_count",
        )
    )  # fmt: skip

    def write(batch: DataFrame, _: int) -> None:
        cassandra_io.upsert(batch, settings.cassandra.keyspace, tables.AGG_SPEED_TABLE)

    writer = (
        aggregates.writeStream.queryName("bench-design-a")
        .outputMode("append")
        .foreachBatch(write)
        .option("checkpointLocation", str(settings.checkpoint_dir / "a"))
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="1 second").start()


def backlog(
    spark: Any, settings: Settings, ledger_dir: Path, n: int
) -> dict[str, tuple[float, int, int]]:
    """Per design: (events/s, windows equal to the ledger, the ledger's windows)."""
    expected = {
        (store, ws.replace(tzinfo=None)): v
        for (store, ws), v in ledger.expected_aggregates(ledger_dir).items()
    }
    results = {}
    for tag in ("a", "b"):
        s, session = _fresh(settings, settings.topics.transactions, tag)
        t0 = time.perf_counter()
        if tag == "a":
            q = design_a(spark, s)
        else:
            q = views_job.start(spark, s, ProgressRecorder(s.speed_status_file), True)
        q.awaitTermination()
        took = time.perf_counter() - t0
        stored = _stored(session)
        exact = sum(1 for k, v in expected.items() if stored.get(k) == v)
        results[tag] = (n / took, exact, len(expected))
        print(
            f"design ({tag}): {n / took:,.0f} events/s over {n} messages ({took:.1f} s); "
            f"windows equal to the ledger: {exact}/{len(expected)}"
        )
    ratio = results["b"][0] / results["a"][0]
    print(f"throughput (b)/(a) = {ratio:.2f}")
    return results


def latency(
    spark: Any, settings: Settings, tag: str, samples: int = LATENCY_SAMPLES
) -> list[float]:
    """Produce one receipt at a time (event time = now) and await it in its window; the
    seconds each took (fewer than `samples` when one was not visible within 30 s)."""
    topic = f"bench.latency.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(settings, {topic: settings.topics.partitions})
    s, session = _fresh(settings.with_overrides(**{"speed_trigger_seconds": 1.0}), topic, tag)
    if tag == "a":
        q = design_a(spark, s, available_now=False)
    else:
        q = views_job.start(spark, s, ProgressRecorder(s.speed_status_file), False)
    producer = Producer({"bootstrap.servers": s.bootstrap_servers, "enable.idempotence": True})
    at = datetime.now(UTC).replace(microsecond=0)
    waits = []
    for i in range(samples):
        r = contract.Receipt(
            at + timedelta(seconds=i), 1, i + 1, 1, (contract.LineItem("Tea", Decimal("1.50"), 1),)
        )
        t0 = time.perf_counter()
        producer.produce(topic, value=encode(r), key=b"1:1")
        producer.flush(10)

        def visible(count: int = i + 1) -> bool:
            rows = session.execute(f"SELECT receipt_count FROM {tables.AGG_SPEED_TABLE}")
            return bool(sum(row.receipt_count for row in rows) >= count)

        if not wait_for(visible, timeout=30, interval=0.05):
            print(f"design ({tag}): receipt {i + 1} not visible in its window within 30 s")
            break
        waits.append(time.perf_counter() - t0)
    q.stop()
    if waits:
        print(
            f"design ({tag}) produce-to-visible latency, 1 s trigger: median "
            f"{statistics.median(waits):.2f} s, max {max(waits):.2f} s over {len(waits)} "
            "receipts"
        )
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=30_000, help="unique receipts")
    parser.add_argument("--batch", type=int, default=1000, help="max records per micro-batch")
    bench_results.add_json_argument(parser, "speed_designs")
    args = parser.parse_args()
    settings = load_settings()
    topic = f"bench.speed.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(settings, {topic: settings.topics.partitions})
    result = simulate(SimulationConfig(
        count=args.count, seed=9, start=datetime(2026, 3, 2, 6, tzinfo=UTC),
        faults=FaultConfig(resend_rate=0.006, late_rate=0.02, late_max_delay_s=4 * 3600,
                           burst_rate=0.02, malformed_rate=0.005),
    ))  # fmt: skip
    produce(result.messages, settings.bootstrap_servers, topic, quiet=True)
    print(f"produced {len(result.messages)} messages ({args.count} unique receipts) to {topic}")
    # The backlog drains in micro-batches of --batch records, as a stream would take it.
    stream = settings.with_overrides(
        **{"topic_transactions": topic, "speed_max_offsets_per_trigger": args.batch}
    )
    spark = build_session(stream, "bench")
    ledger_dir = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    ledger.write(ledger_dir, result.receipts, result.faults, result.summary)
    throughput = backlog(spark, stream, ledger_dir, len(result.messages))
    waits = {tag: latency(spark, settings, tag) for tag in ("a", "b")}
    spark.stop()
    _write(args, len(result.messages), throughput, waits)


def _write(
    args: argparse.Namespace,
    messages: int,
    throughput: dict[str, tuple[float, int, int]],
    waits: dict[str, list[float]],
) -> None:
    names = {"a": "(a) watermark + dedup state", "b": "(b) foreachBatch upserts"}
    every = bench_results.Goal(">=", 1.0, "every window equals the ledger")
    figures = [
        bench_results.vs_peer(
            f"{names['b']} events/s", throughput["b"][0], "events/s",
            f"{names['a']} events/s", throughput["a"][0],
        ),
        bench_results.baseline(f"{names['a']} events/s", throughput["a"][0], "events/s"),
        *(
            bench_results.vs_peer(f"{names[t]} exact windows", throughput[t][1], "windows",
                                  "the ledger's windows", throughput[t][2], every)
            for t in ("a", "b")
        ),
    ]  # fmt: skip
    medians = {t: statistics.median(w) for t, w in waits.items() if len(w) == LATENCY_SAMPLES}
    if "b" in medians:
        label = f"{names['b']} produce-to-visible median"
        if "a" in medians:
            figures.append(bench_results.vs_peer(
                label, medians["b"], "s", f"{names['a']} produce-to-visible median", medians["a"]
            ))  # fmt: skip
        else:
            figures.append(bench_results.baseline(label, medians["b"], "s"))
    not_visible = [names[t] for t in ("a", "b") if t not in medians]
    runs = [
        {"design": names[t], "messages": messages, "events_per_s": throughput[t][0],
         "exact_windows": throughput[t][1], "ledger_windows": throughput[t][2],
         "latency_s": waits[t]}
        for t in ("a", "b")
    ]  # fmt: skip
    bench_results.write(
        args,
        "speed_designs",
        figures,
        runs=runs,
        notes=f"{args.count:,} receipts with faults ({messages:,} messages), micro-batches of "
        f"{args.batch}; latency: {LATENCY_SAMPLES} receipts, 1 s trigger"
        + (f"; not visible within 30 s: {', '.join(not_visible)}" if not_visible else ""),
    )


if __name__ == "__main__":
    main()
