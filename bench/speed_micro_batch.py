"""The fixed cost of a small views micro-batch, stage by stage, and what a change buys.

    python bench/speed_micro_batch.py [--step 3] [--batches 10] [--warmup 4] [--rounds 2]

A micro-batch of a few records (latency's case: 10 events/s with a 1 s trigger) costs
seconds whatever its size; this benchmark says where they go. It produces a fresh
faulted topic (bench/faulted_topic.py), then runs, in one warm driver per variant,
`--batches` consecutive micro-batches of `--step` records per Kafka partition each
through the views job's own micro-batch (`ViewsBatch.process`, as `foreachBatch`
calls it) into a fresh keyspace, timing every stage: the first action (Kafka read,
validation, the valid/invalid counts), the winner rule (its local checkpoint's
shuffles run when it is planned), the tally, each Cassandra write, and the rest
(building the plans in Python). The first `--warmup` micro-batches (JIT, caches) are
left out. The micro-batches come from Spark's batch Kafka reader, which resolves its
offsets when the first action is planned (the streaming source does that before
`foreachBatch`, in `latestOffset`): the first action's figure includes it. Variants
alternate, `--rounds` times, in separate drivers:

  - the project's Spark configuration (infra/spark.py);
  - the same with Spark's default code-generation cache (100 classes), the state
    before that setting: the peer the change is measured against.

Each driver's views are checked against the simulator's own labels of the messages it
read (receipts, resends, malformed; parsed here with `json`): distinct receipts in
`receipt_keys`, their sum in `agg_15m_speed`, one dead letter per malformed message.
Figures count only when exact. Writes docs/bench/speed_micro_batch.json. Needs
`make up`; drops its keyspaces at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import results  # bench/, beside this script

from infra import cassandra_client, schema_apply
from infra.settings import Settings, load_settings

VARIANTS = {
    # name -> Spark settings laid over the project's (the child's --conf)
    "project configuration": {},
    "Spark's default codegen cache (100)": {"spark.sql.codegen.cache.maxEntries": "100"},
}
FIRST_ACTION = "Kafka read + validation + counts (first action)"
STAGES = (
    FIRST_ACTION,
    "winner rule (local checkpoint planned, its shuffles run)",
    "tally (collect)",
    "write dead_letters",
    "write conflicts",
    "write receipts_by_store_day",
    "write receipt_keys",
    "write agg_15m_speed (window rows read, added, written)",
    "rest: plans built in Python",
)


# --- child: one warm driver, consecutive micro-batches, every stage timed ------------


def child(args: argparse.Namespace) -> None:
    from pyspark.sql import DataFrame

    import infra.spark as spark_setup
    from adapters import cassandra
    from schemas import contract, cql
    from speed_layer import views_job
    from views import winners

    conf_over: dict[str, str] = json.loads(args.conf)
    project_conf = spark_setup.spark_conf

    def conf(settings: Settings, app_name: str) -> dict[str, str]:
        return {**project_conf(settings, app_name), **conf_over}

    spark_setup.spark_conf = conf  # type: ignore[assignment]  # the variant's settings
    settings = load_settings().model_copy(update={"topic_transactions": args.topic})
    spark = spark_setup.build_session(settings, "pos-bench-micro-batch")
    marks: list[tuple[str, float]] = []

    def timed(stage: str, fn: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            marks.append((stage, time.perf_counter() - t0))

    real_upsert, real_collect = cassandra.upsert, DataFrame.collect
    real_materialised = winners.Resolution.materialised

    def upsert(df: DataFrame, keyspace: str, table: str, columns: tuple[str, ...] = ()) -> None:
        stage = next((s for s in STAGES if s.startswith(f"write {table}")), f"write {table}")
        timed(stage, real_upsert, df, keyspace, table, columns)

    def collect(df: DataFrame) -> Any:
        first = not any(s == FIRST_ACTION for s, _ in marks)
        return timed(FIRST_ACTION if first else "tally (collect)", real_collect, df)

    def materialised(self: Any) -> Any:
        return timed(STAGES[1], real_materialised, self)

    cassandra.upsert = upsert  # type: ignore[assignment]
    DataFrame.collect = collect  # type: ignore[method-assign]
    winners.Resolution.materialised = materialised  # type: ignore[method-assign]

    job = views_job.ViewsBatch(
        spark=spark,
        keyspace=args.keyspace,
        late_threshold_us=int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000),
        max_lateness_us=int(settings.speed_max_lateness_hours * 3600 * 1_000_000),
    )
    cassandra.await_tables(spark, args.keyspace, [cql.RAW_TABLE, cql.AGG_SPEED_TABLE])
    parts = range(settings.topic_partitions)
    for n in range(args.batches):
        lo, hi = n * args.step, (n + 1) * args.step
        batch = (
            spark.read.format("kafka")
            .options(**settings.spark_kafka_options)
            .option("subscribe", args.topic)
            .option("kafka.isolation.level", "read_committed")
            .option("startingOffsets", json.dumps({args.topic: {str(p): lo for p in parts}}))
            .option("endingOffsets", json.dumps({args.topic: {str(p): hi for p in parts}}))
            .load()
        )
        marks.clear()
        t0 = time.perf_counter()
        counts = job.process(batch)
        total = time.perf_counter() - t0
        stages = {s: 0.0 for s in STAGES}
        for stage, secs in marks:
            stages[stage] += secs
        stages[STAGES[-1]] = total - sum(secs for _, secs in marks)
        rows = counts.valid_rows + counts.invalid_rows
        line = {"batch": n, "rows": rows, "ms": total * 1000}
        line["stages_ms"] = {s: round(v * 1000, 1) for s, v in stages.items()}
        print(json.dumps(line), flush=True)
    spark.stop()


# --- parent: topic, alternating drivers, checks, figures ------------------------------


def expected(settings: Settings, topic: str, kinds: dict[bytes, str], end: int) -> dict[str, int]:
    """From the messages the drivers read (offsets [0, end) of every partition) and the
    simulator's labels: distinct receipts and malformed messages."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"bench-micro-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.topic_partitions)])
    keys, malformed, seen = set(), 0, {p: 0 for p in range(settings.topic_partitions)}
    while any(n < end for n in seen.values()):
        msg = consumer.poll(10)
        if msg is None:
            raise SystemExit(f"topic {topic}: fewer than {end} records per partition")
        if msg.error() or msg.offset() >= end:
            continue
        seen[msg.partition()] += 1
        if kinds[msg.value()].startswith("malformed"):
            malformed += 1
        else:
            r = json.loads(msg.value())
            keys.add((r["operation_id"], r["vendor_fiscal_module"], r["transaction_id"]))
    consumer.close()
    return {"receipts": len(keys), "dead_letters": malformed}


def observed(settings: Settings, keyspace: str) -> dict[str, int]:
    cluster = cassandra_client.cluster(settings)
    try:
        s = cluster.connect(keyspace)
        return {
            "receipts": s.execute("SELECT count(*) FROM receipt_keys").one()[0],
            "windowed": sum(r.receipt_count for r in s.execute("SELECT * FROM agg_15m_speed")),
            "dead_letters": s.execute("SELECT count(*) FROM dead_letters").one()[0],
        }
    finally:
        cluster.shutdown()


def run_driver(args: argparse.Namespace, topic: str, keyspace: str, conf: dict[str, str]) -> Any:
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--child", "--topic", topic,
        "--keyspace", keyspace, "--step", str(args.step), "--batches", str(args.batches),
        "--conf", json.dumps(conf),
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--step", type=int, default=3, help="records per partition and batch")
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per driver")
    parser.add_argument("--warmup", type=int, default=4, help="first micro-batches left out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--keyspace", help=argparse.SUPPRESS)
    parser.add_argument("--conf", default="{}", help=argparse.SUPPRESS)
    results.add_json_argument(parser, "speed_micro_batch")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not 0 <= args.warmup < args.batches:
        parser.error("--warmup must be at least 0 and below --batches")

    from faulted_topic import produce_faulted_topic

    base = load_settings()
    # Enough records for every partition's slices (keys spread devices over partitions).
    count = args.step * args.batches * base.topic_partitions * 3
    settings, sim = produce_faulted_topic(base, "bench.micro", count)
    topic = settings.topic_transactions
    kinds = {m.value: m.kind for m in sim.messages}
    want = expected(settings, topic, kinds, args.step * args.batches)
    print(f"topic {topic}: {args.batches} micro-batches of {args.step} records per partition; "
          f"expected {want}", flush=True)  # fmt: skip
    runs: list[dict[str, Any]] = []
    keyspaces: list[str] = []
    try:
        for rnd in range(1, args.rounds + 1):
            for name, conf in VARIANTS.items():
                ks = f"bench_mb_{uuid.uuid4().hex[:6]}"
                keyspaces.append(ks)
                schema_apply.apply_cql(base, ks)
                batches = run_driver(args, topic, ks, conf)
                got = observed(base, ks)
                exact = got == {**want, "windowed": want["receipts"]}
                warm = batches[args.warmup :]
                ms = statistics.median(b["ms"] for b in warm)
                print(f"round {rnd}, {name}: warm median {ms:,.0f} ms per micro-batch "
                      f"({statistics.median(b['rows'] for b in warm):.0f} records); "
                      f"{'exact' if exact else f'NOT EXACT: {got}'}", flush=True)  # fmt: skip
                runs.append({"round": rnd, "variant": name, "conf": conf, "exact": exact,
                             "observed": got, "expected": want, "batches": batches})  # fmt: skip
    finally:
        cluster = cassandra_client.cluster(base, writes=True)
        session = cluster.connect()
        for ks in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
        cluster.shutdown()
    if not all(r["exact"] for r in runs):
        raise SystemExit("a driver's views were not exact: its figures do not count")
    _report(args, runs)


def _report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    def warm(variant: str) -> list[dict[str, Any]]:
        return [b for r in runs if r["variant"] == variant for b in r["batches"][args.warmup :]]

    project, peer = list(VARIANTS)
    med = {v: statistics.median(b["ms"] for b in warm(v)) for v in VARIANTS}
    rows = statistics.median(b["rows"] for b in warm(project))
    print("\n| stage (warm medians, ms) | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    for stage in STAGES:
        cells = [statistics.median(b["stages_ms"][stage] for b in warm(v)) for v in VARIANTS]
        print(f"| {stage} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    print("| **micro-batch** | " + " | ".join(f"**{med[v]:,.0f}**" for v in VARIANTS) + " |")
    figures = [
        results.vs_peer(
            f"views micro-batch of ~{rows:.0f} records, {project}", med[project], "ms",
            peer, med[peer],
        ),
        results.vs_floor(
            f"views micro-batch of ~{rows:.0f} records", med[project], "ms",
            "trigger interval (1 s)", 1000.0,
            goal=results.Goal("<=", 1.0, "issue 11: a 10-row micro-batch under 1 s"),
        ),
        *(
            results.baseline(f"{stage} ({project})",
                             statistics.median(b["stages_ms"][stage] for b in warm(project)), "ms")
            for stage in STAGES
        ),
    ]  # fmt: skip
    results.write(
        args,
        "speed_micro_batch",
        figures,
        runs,
        notes=f"{args.batches} consecutive micro-batches of {args.step} records per partition "
        f"per driver, first {args.warmup} left out (warm medians); variants alternate, "
        f"{args.rounds} round(s), one driver each; every driver's views exact",
    )


if __name__ == "__main__":
    main()
