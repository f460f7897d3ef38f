"""Batch layer and master dataset, measured in one run with side-by-side ratios.

    python bench/batch_recompute.py [--sizes 1000000,2000000] [--seconds 86400]
                                    [--baseline REV [--rounds 2]]

1. Master dataset read time, before and after compaction: one day's partition as the
   archiver's 1 s trigger leaves it, one small file per micro-batch (`--seconds` of
   them, 10 records each), read (full scan + count) before and after OPTIMIZE. The
   files are written 600 to a commit (one per second of a 10-minute slice): what
   slows a reader is the number of files, not of commits, which Delta checkpoints
   every 10; writing 86,400 single-file commits would take hours.
2. The batch job (`pos-batch run` over one day, lookback 0, writes to Cassandra
   included) over master datasets of each size, in events/s and the time ratio of the
   largest to the smallest; and, in the same run on the same Delta table, Spark's own
   read-parse-aggregate (`from_json`, grouped per store and 15-minute window, no
   validation, no dedup, no writes): the floor the job is compared to.

With `--baseline REV`, the batch job of each size runs again with the project's code at
git revision REV (a worktree; its own script generates its own master rows, in its
archiver's layout), alternated with this checkout's, `--rounds` times each, every run
in a fresh process (a JVM of its own): what a change to the batch layer costs or buys,
side by side. The figures then are medians of the rounds.

Master rows are generated in Spark (valid receipts of 20 stores over one day, 0.6 %
resends with later offsets), in the archiver's exact schema, so what is measured is
the batch job, not the simulator. Writes docs/bench/batch_recompute.json
(bench/results.py; --no-json: don't). Needs Cassandra (`make up`); uses its own keyspace
and a temporary data dir, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import results as bench_results  # bench/, beside this script
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pos_lambda.adapters import master_dataset, schema_apply
from pos_lambda.adapters.spark_session import build_session
from pos_lambda.batch_layer import job
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.schemas import contract
from pos_lambda.settings import Settings, load_settings
from pos_lambda.views.aggregation import window_start

DAY = datetime(2026, 3, 2, tzinfo=UTC)
RESEND_RATE = 0.006


def master_rows(
    spark: SparkSession, n: int, lo: int = 0, hi: int | None = None, files: int | None = None
) -> DataFrame:
    """Rows lo..hi of n archiver-shaped master rows spread over 2 March: valid receipts
    plus resends, in `files` contiguous slices (default: Spark's choice).

    Every 1/RESEND_RATE-th row is a resend of the previous receipt (same content, a
    later offset), so the winner rule has work to do.
    """
    step_us = 86_400_000_000 // max(n, 1)
    day_us = int(DAY.timestamp() * 1_000_000)
    every = int(1 / RESEND_RATE)
    ids = spark.range(lo, n if hi is None else hi, 1, files).withColumn(
        "tid",
        F.when((F.col("id") % every == 0) & (F.col("id") > 0), F.col("id") - 1).otherwise(
            F.col("id")
        ),
    )
    happened = F.timestamp_micros(F.lit(day_us) + F.col("tid") * step_us)
    # The producer's canonical JSON, in the contract's field order (what the archiver
    # stores as received); the batch job judges it like any record.
    message = F.struct(
        F.date_format(happened, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("happened_at"),
        (F.lit(101) + F.col("tid") % 20).cast("long").alias("operation_id"),
        (F.col("tid") + 1).cast("long").alias("transaction_id"),  # the contract: from 1
        F.lit(1).cast("long").alias("vendor_fiscal_module"),
        F.array(
            F.struct(
                F.lit("Espresso").alias("title"),
                F.lit("1.90").alias("price"),
                F.lit(2).cast("long").alias("amount"),
            )
        ).alias(contract.LINE_ITEMS_JSON_NAME),
    )
    return ids.select(
        F.lit("pos.transactions").alias("kafka_topic"),
        F.lit(0).alias("kafka_partition"),
        F.col("id").alias("kafka_offset"),
        (happened + F.expr("INTERVAL 2 SECONDS")).alias("kafka_timestamp"),
        F.lit(None).cast("binary").alias("kafka_key"),
        F.encode(F.to_json(message), "UTF-8").alias("raw_value"),
        F.current_timestamp().alias("ingested_at"),
        F.to_date(happened).alias("event_day"),
    )


def append(rows: DataFrame, settings: Settings) -> None:
    (
        rows.write.format("delta")
        .mode("append")
        .partitionBy("event_day")
        .save(str(settings.master_dataset_dir))
    )


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def read_all(spark: SparkSession, settings: Settings) -> int:
    """A full scan: counts rows and sums a data column. A bare count() would be answered
    from the Delta log's file statistics without opening a single Parquet file."""
    rows = master_dataset.snapshot(spark, settings).rows
    count, _ = rows.agg(F.count(F.lit(1)), F.sum("kafka_offset")).first()  # type: ignore[misc]
    return int(count)


def floor(spark: SparkSession, settings: Settings) -> int:
    """Spark's own read-parse-aggregate: no validation, no dedup, no writes."""
    rows = master_dataset.snapshot(spark, settings).rows
    message = F.from_json(F.col("raw_value").cast("string"), contract.spark_message_schema())
    parsed = rows.select(message.alias("m"))
    return len(
        parsed.groupBy("m.operation_id", window_start(F.to_timestamp("m.happened_at")))
        .agg(F.count(F.lit(1)), F.sum(F.size(f"m.{contract.LINE_ITEMS_JSON_NAME}")))
        .collect()
    )


def compaction(spark: SparkSession, base: Settings, seconds: int) -> dict[str, Any]:
    s = base.with_overrides(**{"data_dir": base.data_dir / "compaction"})
    per_second, per_commit = 10, 600
    n = seconds * per_second
    t0 = time.perf_counter()
    for lo in range(0, seconds, per_commit):
        hi = min(lo + per_commit, seconds)
        # One partition per second of the slice: one file per simulated micro-batch.
        append(master_rows(spark, n, lo * per_second, hi * per_second, hi - lo), s)
        print(f"  wrote {hi:,} of {seconds:,} micro-batch files", end="\r", flush=True)
    print(f"  wrote {seconds:,} files in {time.perf_counter() - t0:.0f} s" + " " * 20)
    files_before = len(master_dataset.snapshot(spark, s).rows.inputFiles())
    read_all(spark, s)  # warm the JVM and the file listing cache equally for both reads
    before, count = timed(lambda: read_all(spark, s))
    optimize_s, _ = timed(lambda: master_dataset.optimize(spark, s))
    files_after = len(master_dataset.snapshot(spark, s).rows.inputFiles())
    read_all(spark, s)
    after, count_after = timed(lambda: read_all(spark, s))
    assert count == count_after == n, (count, count_after, n)
    print(
        f"master dataset, one day of {seconds:,} 1 s micro-batches ({n:,} records): "
        f"{files_before:,} files read in {before:.2f} s; OPTIMIZE took {optimize_s:.0f} s; "
        f"after it {files_after:,} files read in {after:.2f} s: after/before = "
        f"{after / before:.3f}"
    )
    return {"part": "compaction", "files_before": files_before, "read_before_s": before,
            "optimize_s": optimize_s, "files_after": files_after, "read_after_s": after,
            "records": n}  # fmt: skip


def batch(spark: SparkSession, base: Settings, sizes: list[int]) -> list[dict[str, Any]]:
    interval = Interval(DAY, DAY + timedelta(days=1))
    results = {}
    runs = []
    for n in sizes:
        # Its own keyspace and table per size: the sizes never share rows.
        s = base.with_overrides(
            **{
                "data_dir": base.data_dir / f"batch-{n}",
                "cassandra_keyspace": f"{base.cassandra.keyspace}_{n}",
            }
        )
        schema_apply.apply_cql(s)
        append(master_rows(spark, n), s)
        floor(spark, s)  # warm-up (JIT, file listing) before either measurement
        floor_s, _ = timed(lambda s=s: floor(spark, s))
        job_s, result = timed(lambda s=s: job.run(spark, s, interval))
        results[n] = job_s
        runs.append({"part": "batch", "records": n, "job_s": job_s, "floor_s": floor_s,
                     "receipts": result.receipts,
                     "duplicates_removed": result.duplicates_removed})  # fmt: skip
        print(
            f"batch job, {n:,} master records: {job_s:.1f} s = {n / job_s:,.0f} events/s "
            f"({result.receipts:,} receipts, {result.duplicates_removed:,} resends removed); "
            f"floor (read + aggregate, no dedup, no writes) {floor_s:.1f} s = "
            f"{n / floor_s:,.0f} events/s: job/floor time = {job_s / floor_s:.1f}"
        )
    if len(sizes) > 1:
        lo, hi = min(sizes), max(sizes)
        print(f"batch job time ratio {hi:,}/{lo:,} records = {results[hi] / results[lo]:.2f}")
    return runs


def figures(runs: list[dict[str, Any]], baseline: str | None = None) -> list[bench_results.Figure]:
    """The report's figures; with a baseline, this checkout's medians and the ratios of
    its batch job's time to the baseline's."""
    out = []
    for r in runs:
        if r["part"] == "compaction":
            out += [
                bench_results.vs_peer(
                    f"read after OPTIMIZE ({r['files_after']:,} files)", r["read_after_s"], "s",
                    f"read before ({r['files_before']:,} files)", r["read_before_s"],
                ),
                bench_results.baseline(
                    f"read before ({r['files_before']:,} files)", r["read_before_s"], "s"
                ),
            ]  # fmt: skip
    jobs = medians(batch_runs(runs, "this"))
    for r in jobs:
        n = f"{r['records']:,} records"
        out += [
            bench_results.vs_floor(f"batch job, {n}", r["job_s"], "s",
                                   f"read + aggregate (Spark), {n}", r["floor_s"]),
            bench_results.baseline(f"read + aggregate (Spark), {n}", r["floor_s"], "s"),
        ]  # fmt: skip
    if len(jobs) > 1:
        lo, hi = min(jobs, key=lambda r: r["records"]), max(jobs, key=lambda r: r["records"])
        linear = bench_results.Goal("<=", hi["records"] / lo["records"], "linear in the records")
        out.append(bench_results.vs_peer(
            f"batch job, {hi['records']:,} records (scaling)", hi["job_s"], "s",
            f"batch job, {lo['records']:,} records", lo["job_s"], linear,
        ))  # fmt: skip
    if baseline:
        theirs = {r["records"]: r for r in medians(batch_runs(runs, baseline))}
        for r in jobs:
            n = f"{r['records']:,} records"
            out.append(bench_results.vs_peer(
                f"batch job, {n}, this checkout", r["job_s"], "s",
                f"batch job, {n}, {baseline}", theirs[r["records"]]["job_s"],
            ))  # fmt: skip
    return out


def batch_runs(runs: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    """The batch-job runs of one code ("this" or a baseline's name; a run of a
    benchmark without a baseline is this checkout's)."""
    return [r for r in runs if r["part"] == "batch" and r.get("code", "this") == code]


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per size: the median job and floor times of that size's rounds (a run
    without rounds stands for itself)."""
    sizes = sorted({r["records"] for r in runs})
    return [
        {"records": n,
         **{k: statistics.median(r[k] for r in runs if r["records"] == n)
            for k in ("job_s", "floor_s")}}
        for n in sizes
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000000,2000000", help="master records per batch-job run ('' skips)"
    )
    parser.add_argument(
        "--seconds",
        type=int,
        default=86_400,
        help="micro-batch files of the compaction day (default: one day of 1 s triggers; 0 skips)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run the batch job with the project's code at this git revision (e.g. "
        "HEAD~1), alternated with this checkout's, each run in a process of its own",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --baseline: runs of each code per size"
    )
    bench_results.add_json_argument(parser, "batch_recompute")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    name = None
    if args.baseline:
        with bench_results.code_at(args.baseline) as (name, tree):
            runs = side_by_side(args, name, tree)
    else:
        runs = measure(args)
    bench_results.write(
        args,
        "batch_recompute",
        figures(runs, name),
        runs,
        notes="compaction: a day's partition of 1 s micro-batch files, full scan before and "
        f"after OPTIMIZE ({args.seconds:,} files); batch job: `pos-batch run` over one day "
        "vs Spark's read + aggregate of the same Delta table (no dedup, no writes)"
        + (f"; vs {name}, {args.rounds} alternated round(s) each, medians, "
           "every run in a process of its own" if args.baseline else ""),
    )  # fmt: skip


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """This checkout's compaction and batch runs, in this process."""
    tmp = Path(tempfile.mkdtemp(prefix="pos-bench-batch-"))
    settings = load_settings().with_overrides(
        **{"data_dir": tmp, "cassandra_keyspace": f"bench_{uuid.uuid4().hex[:8]}"}
    )
    schema_apply.apply_cql(settings)
    spark = build_session(settings, "pos-bench-batch")
    sizes = [int(x) for x in args.sizes.split(",") if x]
    runs: list[dict[str, Any]] = []
    try:
        if args.seconds:
            runs.append(compaction(spark, settings, args.seconds))
        if sizes:
            runs += batch(spark, settings, sizes)
    finally:
        spark.stop()
        from cassandra.cluster import Cluster

        cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
        session = cluster.connect()
        for name in [
            settings.cassandra.keyspace,
            *(f"{settings.cassandra.keyspace}_{n}" for n in sizes),
        ]:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return runs


def side_by_side(args: argparse.Namespace, name: str, tree: Path) -> list[dict[str, Any]]:
    """Each size's batch job with this checkout's code and with the baseline's, alternated
    (every other round the baseline first), each run this script (or the baseline's own)
    in a fresh process; the compaction once, with this checkout's code. The runs carry
    `code` ("this" or the baseline's name) and `round`."""
    here = Path(__file__).resolve()
    runs: list[dict[str, Any]] = []
    if args.seconds:
        runs += child_runs(here, None, ["--sizes", "", "--seconds", str(args.seconds)])
    codes = [("this", here, None), (name, tree / "bench" / here.name, tree)]
    for n in [int(x) for x in args.sizes.split(",") if x]:
        for rnd in range(args.rounds):
            for code, script, root in codes[::-1] if rnd % 2 else codes:
                print(f"round {rnd + 1}, {n:,} records: {code}", flush=True)
                for r in child_runs(script, root, ["--sizes", str(n), "--seconds", "0"]):
                    runs.append({**r, "code": code, "round": rnd + 1})
    return runs


def child_runs(script: Path, tree: Path | None, argv: list[str]) -> list[dict[str, Any]]:
    """Run a batch_recompute script (tree: another revision's, with that revision's
    modules) in a process of its own; its `runs`."""
    with tempfile.TemporaryDirectory(prefix="pos-bench-batch-run-") as d:
        out = Path(d) / "runs.json"
        env = bench_results.code_env(tree) if tree else None
        subprocess.run([sys.executable, str(script), *argv, "--json", str(out)],
                       cwd=tree or bench_results.PROJECT_ROOT, env=env, check=True)  # fmt: skip
        return list(json.loads(out.read_text())["runs"])


if __name__ == "__main__":
    main()
