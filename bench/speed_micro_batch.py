"""The fixed cost of a small views micro-batch, stage by stage, and what a change buys.

    python -m bench.speed_micro_batch [--step 3] [--batches 10] [--warmup 4] [--rounds 2]

A micro-batch of a few records (latency's case: 10 events/s with a 1 s trigger) costs
seconds whatever its size; this benchmark says where they go. It produces a fresh
faulted topic (bench/faulted_topic.py), then runs, in one driver per variant, the
views query as `pos-speed run --available-now --jobs views` starts it
(`views_job.start`), capped at `--step` records per Kafka partition and micro-batch
(maxOffsetsPerTrigger), into a fresh keyspace, for `--batches` micro-batches. Inside
`foreachBatch` every stage is timed: the first action (Kafka read, validation, the
valid/invalid counts), the winner rule (its local checkpoint's shuffles run when it
is planned), the tally, each Cassandra write, and the rest (building the plans in
Python); Spark's progress adds the time around `foreachBatch` (offsets, planning,
write-ahead log, commit) and the whole micro-batch (`triggerExecution`). The first
`--warmup` micro-batches (JIT, caches) are left out. Variants
alternate, `--rounds` times, in separate drivers:

  - the project's Spark configuration (src/pos_lambda/adapters/spark_session.py);
  - the same with PySpark's own worker daemon (`pyspark.daemon`), whose workers
    re-read Spark's zip archives before every task on Python 3.11 and run a full
    garbage collection after it: the peer the project's daemon
    (src/pos_lambda/adapters/spark_python_daemon.py) is measured against;
  - or, with `--variant NAME:key=value;...` (repeatable), the settings to try before
    making them the project's (with `--no-json`, not to overwrite the report): Spark
    settings, and the project's own POS_ settings (`POS_SPEED_DRIVER_WRITES_BELOW=2500`),
    which that variant's driver gets in its environment, over what every driver
    inherits;
  - or, with `--baseline REV`, the project's code at a git revision (a worktree of
    this repository, its own copy of this script as the driver): what a code change
    buys, measured side by side.

Each driver's views are checked against the simulator's own labels of the messages it
read (receipts, resends, malformed; parsed here with `json`): distinct receipts in
`receipt_keys`, their sum in `agg_15m_speed`, one dead letter per malformed message.
Figures count only when exact. Writes docs/bench/speed_micro_batch.json. Needs
`make up`; drops its keyspaces at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import harness, results, revisions
from pos_lambda.adapters import cassandra_client, schema_apply
from pos_lambda.settings import Settings, load_settings

PROJECT = "project configuration"
OUTSIDE = "outside foreachBatch (offsets, planning, WAL, commit)"
# The peers: name -> Spark settings laid over the project's (the child's --conf).
# `--variant` replaces them, to try a setting before making it the project's.
PEERS = {"PySpark's own worker daemon": {"spark.python.daemon.module": "pyspark.daemon"}}
FIRST_ACTION = "Kafka read + validation + counts (first action)"
DRIVER_READS = "stored rows read by the driver (receipt_keys, agg_15m_speed)"
STAGES = (
    FIRST_ACTION,
    DRIVER_READS,
    WINNER_RULE := "winner rule (local checkpoint planned, its shuffles run)",
    "tally (collect)",
    "write dead_letters",
    "write conflicts",
    "write receipts_by_store_day",
    "write receipt_keys",
    "write receipts_by_store_day, receipt_keys (one collect)",
    "write agg_15m_speed (window rows read, added, written)",
    "rest: plans built in Python",
)
VISIBLE_STAGE = STAGES[-2]
VISIBLE = "aggregates written (from foreachBatch's start)"


# --- child: one warm driver, consecutive micro-batches, every stage timed ------------


def child(args: argparse.Namespace) -> None:
    from pyspark.sql import DataFrame

    import pos_lambda.adapters.spark_session as spark_setup
    from pos_lambda.adapters import cassandra, driver_lookup, driver_writes
    from pos_lambda.speed_layer import views_batch, views_job
    from pos_lambda.speed_layer.progress import BatchCounts, ProgressRecorder
    from pos_lambda.views import winners

    conf_over: dict[str, str] = json.loads(args.conf)
    project_conf = spark_setup.spark_conf

    def conf(
        settings: Settings, app_name: str, java_options: tuple[str, ...] = ()
    ) -> dict[str, str]:
        return {**project_conf(settings, app_name, java_options), **conf_over}

    spark_setup.spark_conf = conf  # the variant's settings
    settings = load_settings().with_overrides(**{"topic_transactions": args.topic})
    spark = spark_setup.build_session(settings, "pos-bench-micro-batch")
    marks: list[tuple[str, float, float]] = []  # (stage, seconds, when it ended)

    def timed(stage: str, fn: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            end = time.perf_counter()
            marks.append((stage, end - t0, end))

    real_upsert, real_collect = cassandra.upsert, DataFrame.collect
    real_materialised = winners.Resolution.materialised
    real_rows = driver_lookup.DriverLookup.rows
    real_driver_upsert = driver_writes.DriverWriter.upsert_each
    writing = False  # inside a write: its collect is the write's

    def write_stage(table: str) -> str:
        return next((s for s in STAGES if s.startswith(f"write {table}")), f"write {table}")

    def upsert(df: DataFrame, keyspace: str, table: str, columns: tuple[str, ...] = ()) -> None:
        timed(write_stage(table), real_upsert, df, keyspace, table, columns)

    def driver_upsert(self: Any, df: DataFrame, targets: Any, *rest: Any) -> None:
        nonlocal writing
        writing = True
        try:
            tables = ", ".join(t.table for t in targets)
            timed(write_stage(tables), real_driver_upsert, self, df, targets, *rest)
        finally:
            writing = False

    def collect(df: DataFrame) -> Any:
        if writing:
            return real_collect(df)
        first = not any(s == FIRST_ACTION for s, *_ in marks)
        return timed(FIRST_ACTION if first else "tally (collect)", real_collect, df)

    def materialised(self: Any) -> Any:
        return timed(WINNER_RULE, real_materialised, self)

    def rows(self: Any, *a: Any, **k: Any) -> Any:
        return timed(DRIVER_READS, real_rows, self, *a, **k)

    cassandra.upsert = upsert  # type: ignore[assignment]
    DataFrame.collect = collect  # type: ignore[method-assign,assignment]
    winners.Resolution.materialised = materialised  # type: ignore[method-assign]
    driver_lookup.DriverLookup.rows = rows  # type: ignore[method-assign]
    driver_writes.DriverWriter.upsert_each = driver_upsert  # type: ignore[method-assign,assignment]

    # The views query as `pos-speed run --available-now --jobs views` starts it, capped
    # at `--step` records per partition and micro-batch; micro-batches past `--batches`
    # do nothing (the views then hold exactly the first ones) and stop the query.
    parts = settings.topics.partitions
    data_dir = Path(tempfile.mkdtemp(prefix="pos-bench-micro-"))
    settings = settings.with_overrides(
        **{
            "cassandra_keyspace": args.keyspace,
            "data_dir": data_dir,
            "speed_starting_offsets": "earliest",
            "speed_max_offsets_per_trigger": args.step * parts,
        }
    )
    real_process = views_batch.ViewsBatch.process
    lines: list[dict[str, Any]] = []

    # Whatever the views job passes on (the micro-batch, how to validate it) goes through.
    def process(self: Any, batch: DataFrame, *rest: Any, **kwargs: Any) -> Any:
        if len(lines) >= args.batches:
            return BatchCounts()
        marks.clear()
        t0 = time.perf_counter()
        counts = real_process(self, batch, *rest, **kwargs)
        total = time.perf_counter() - t0
        stages = {s: 0.0 for s in STAGES}
        for stage, secs, _ in marks:
            stages[stage] += secs
        stages[STAGES[-1]] = total - sum(secs for _, secs, _ in marks)
        visible_at = max((end for s, _, end in marks if s == VISIBLE_STAGE), default=t0 + total)
        lines.append(
            {
                "rows": counts.valid_rows + counts.invalid_rows,
                "ms": total * 1000,
                # What a reader of agg_15m_speed waits for: the aggregates' write done.
                "visible_ms": (visible_at - t0) * 1000,
                "stages_ms": {s: round(v * 1000, 1) for s, v in stages.items()},
            }
        )
        return counts

    views_batch.ViewsBatch.process = process  # type: ignore[method-assign]
    recorder = ProgressRecorder(data_dir / "status.json")
    query = views_job.start(spark, settings, recorder, available_now=True)

    # Spark records a micro-batch's progress after foreachBatch returns: await it too.
    def measured() -> bool:
        last = query.lastProgress
        return len(lines) >= args.batches and last is not None and last["batchId"] >= len(lines) - 1

    while query.isActive and not measured():
        query.awaitTermination(0.5)  # type: ignore[arg-type]  # seconds, a float too
    query.stop()
    # Spark's own account of each micro-batch: the time around foreachBatch too.
    progress = {p["batchId"]: p for p in query.recentProgress}
    for n, line in enumerate(lines):
        durations = progress[n]["durationMs"]
        outside = durations["triggerExecution"] - durations.get("addBatch", 0)
        line |= {"batch": n, "trigger_ms": durations["triggerExecution"], "outside_ms": outside}
        print(json.dumps(line), flush=True)
    end = progress[len(lines) - 1]["sources"][0]["endOffset"]  # JSON text or parsed
    ends = (json.loads(end) if isinstance(end, str) else end)[args.topic]
    print(json.dumps({"end_offsets": {int(p): int(o) for p, o in ends.items()}}), flush=True)
    spark.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


# --- parent: topic, alternating drivers, checks, figures ------------------------------


def expected(
    settings: Settings, topic: str, kinds: dict[bytes, str], ends: dict[int, int]
) -> dict[str, int]:
    """From the messages a driver read (offsets [0, ends[p]) of each partition p) and the
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
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.topics.partitions)])
    keys, malformed, seen = set(), 0, {p: 0 for p in range(settings.topics.partitions)}
    while any(seen[p] < ends.get(p, 0) for p in seen):
        msg = consumer.poll(10)
        if msg is None:
            raise SystemExit(f"topic {topic}: fewer records than the driver read ({ends})")
        if msg.error():
            continue
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        if partition is None or offset is None or value is None:
            raise SystemExit(f"topic {topic}: a record without a partition, offset or value")
        if offset >= ends.get(partition, 0):
            continue
        seen[partition] += 1
        if kinds[value].startswith("malformed"):
            malformed += 1
        else:
            r = json.loads(value)
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


def run_driver(
    args: argparse.Namespace,
    topic: str,
    keyspace: str,
    conf: dict[str, str],
    tree: Path | None = None,
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """One driver's micro-batches, and the Kafka end offsets of the last one.

    tree: a checkout of other code to drive (its modules come first on the path, ahead
    of the editable install of this one); None: this checkout.
    """
    # A variant's POS_ settings reach the driver as the project reads them: from its
    # environment; the rest are Spark settings.
    spark = {k: v for k, v in conf.items() if not k.startswith("POS_")}
    cmd, cwd = revisions.bench(
        "speed_micro_batch", "--child", "--topic", topic,
        "--keyspace", keyspace, "--step", str(args.step), "--batches", str(args.batches),
        "--conf", json.dumps(spark), tree=tree,
    )  # fmt: skip
    env = revisions.code_env(tree)  # the tree's code, this checkout's jars and services
    env.update({k: v for k, v in conf.items() if k.startswith("POS_")})
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise SystemExit(f"the driver ({' '.join(cmd[1:3])}) exited {done.returncode}:\n{tail}")
    out = done.stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ends = {int(p): o for p, o in lines.pop()["end_offsets"].items()}
    return lines, ends


def main() -> None:
    parser = harness.parser(__doc__, "speed_micro_batch")
    parser.add_argument("--step", type=int, default=3, help="records per partition and batch")
    parser.add_argument("--batches", type=int, default=10, help="micro-batches per driver")
    parser.add_argument("--warmup", type=int, default=4, help="first micro-batches left out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--variant",
        type=_variant,
        action="append",
        metavar="NAME:key=value;...",
        help="a peer: Spark settings over the project's (repeatable; default: PySpark's "
        "own worker daemon)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="a peer: the project's code at this git revision (e.g. HEAD~1), same settings",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--keyspace", help=argparse.SUPPRESS)
    parser.add_argument("--conf", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not 0 <= args.warmup < args.batches:
        parser.error("--warmup must be at least 0 and below --batches")
    with contextlib.ExitStack() as stack:
        peers = dict(args.variant or ())
        trees: dict[str, Path] = {}
        if args.baseline:
            name, tree = stack.enter_context(revisions.code_at(args.baseline))
            peers[name], trees[name] = {}, tree
        variants = {PROJECT: {}, **(peers or PEERS)}
        runs = measure(args, variants, trees)
    if not all(r["exact"] for r in runs):
        raise SystemExit("a driver's views were not exact: its figures do not count")
    _report(args, runs, list(variants))


def measure(
    args: argparse.Namespace, variants: dict[str, dict[str, str]], trees: dict[str, Path]
) -> list[dict[str, Any]]:
    """Alternating drivers, one per variant and round, on one fresh faulted topic."""
    from bench.faulted_topic import produce_faulted_topic

    base = load_settings()
    # More than the micro-batches read (devices spread unevenly over partitions).
    count = args.step * args.batches * base.topics.partitions * 3
    settings, sim = produce_faulted_topic(base, "bench.micro", count)
    topic = settings.topics.transactions
    kinds = {m.value: m.kind for m in sim.messages}
    print(f"topic {topic}: {args.batches} micro-batches of up to {args.step} records per "
          f"partition", flush=True)  # fmt: skip
    runs: list[dict[str, Any]] = []
    keyspaces: list[str] = []
    try:
        for rnd, (name, conf) in harness.alternate(args.rounds, variants.items()):
            ks = f"bench_mb_{uuid.uuid4().hex[:6]}"
            keyspaces.append(ks)
            schema_apply.apply_cql(base, ks)
            batches, ends = run_driver(args, topic, ks, conf, trees.get(name))
            want = expected(settings, topic, kinds, ends)
            got = observed(base, ks)
            exact = got == {**want, "windowed": want["receipts"]}
            warm = batches[args.warmup :]
            ms = statistics.median(b["ms"] for b in warm)
            print(f"round {rnd}, {name}: warm median {ms:,.0f} ms in foreachBatch "
                  f"({statistics.median(b['rows'] for b in warm):.0f} records); "
                  f"{'exact' if exact else f'NOT EXACT: {got}'}", flush=True)  # fmt: skip
            runs.append({"round": rnd, "variant": name, "conf": conf, "exact": exact,
                         "observed": got, "expected": want, "batches": batches})  # fmt: skip
    finally:
        harness.drop(base, keyspaces)
    return runs


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """`NAME:key=value;key=value` (argparse type of --variant)."""
    name, sep, settings = text.partition(":")
    pairs = [kv.split("=", 1) for kv in settings.split(";") if kv]
    if not sep or not name or any(len(kv) != 2 for kv in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:key=value[;key=value...]")
    return name, dict(pairs)  # type: ignore[arg-type]


def _report(args: argparse.Namespace, runs: list[dict[str, Any]], names: list[str]) -> None:
    def warm(variant: str) -> list[dict[str, Any]]:
        return [b for r in runs if r["variant"] == variant for b in r["batches"][args.warmup :]]

    project, peers = names[0], names[1:]
    med = {v: statistics.median(b["ms"] for b in warm(v)) for v in names}
    rows = statistics.median(b["rows"] for b in warm(project))
    print("\n| stage (warm medians, ms) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for stage in STAGES:
        # An older revision (a --baseline) may not have the stage: 0 there.
        cells = [statistics.median(b["stages_ms"].get(stage, 0) for b in warm(v)) for v in names]
        print(f"| {stage} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    print("| **foreachBatch** | " + " | ".join(f"**{med[v]:,.0f}**" for v in names) + " |")
    # Older revisions (a --baseline) do not report it.
    visible = {v: statistics.median(b.get("visible_ms", math.nan) for b in warm(v)) for v in names}
    print(f"| {VISIBLE} | " + " | ".join(f"{visible[v]:,.0f}" for v in names) + " |")
    outside = {v: statistics.median(b["outside_ms"] for b in warm(v)) for v in names}
    trigger = {v: statistics.median(b["trigger_ms"] for b in warm(v)) for v in names}
    print(f"| {OUTSIDE} | " + " | ".join(f"{outside[v]:,.0f}" for v in names) + " |")
    print("| **micro-batch (Spark's triggerExecution)** | "
          + " | ".join(f"**{trigger[v]:,.0f}**" for v in names) + " |")  # fmt: skip
    figures = [
        *(
            results.vs_peer(f"views micro-batch of ~{rows:.0f} records, {project}",
                            trigger[project], "ms", peer, trigger[peer])
            for peer in peers
        ),
        results.vs_floor(
            f"views micro-batch of ~{rows:.0f} records", trigger[project], "ms",
            "trigger interval (1 s)", 1000.0,
            goal=results.Goal("<=", 1.0, "issue 11: a 10-row micro-batch under 1 s"),
        ),
        *(
            results.baseline(f"{stage} ({project})",
                             statistics.median(b["stages_ms"][stage] for b in warm(project)), "ms")
            for stage in STAGES
        ),
        results.baseline(f"{OUTSIDE} ({project})", outside[project], "ms"),
        results.baseline(f"{VISIBLE} ({project})", visible[project], "ms"),
        *(
            results.vs_peer(f"{VISIBLE}, {project}", visible[project], "ms", peer, visible[peer])
            for peer in peers
            if not math.isnan(visible[peer])
        ),
    ]  # fmt: skip
    results.write(
        args,
        "speed_micro_batch",
        figures,
        runs,
        notes=f"{args.batches} consecutive micro-batches of up to {args.step} records per "
        f"partition per driver (the views query, availableNow, maxOffsetsPerTrigger), first "
        f"{args.warmup} left out (warm medians); micro-batch = Spark's triggerExecution; "
        f"variants alternate, "
        f"{args.rounds} round(s), one driver each; every driver's views exact",
    )


if __name__ == "__main__":
    main()
