"""`pos-speed`: run the speed layer's streaming jobs, or show their progress.

    pos-speed run                  # archiver + views, continuous until SIGTERM/Ctrl-C
    pos-speed run --available-now  # process everything in Kafka now, then exit
    pos-speed status               # last micro-batch of each query (from Cassandra)

Both queries run in one Spark application, each named and with its own checkpoint
under <data_dir>/checkpoints. Stopping is graceful: on SIGTERM the queries are
stopped and the session closed; anything half-done is replayed from the
checkpoint on the next start, and the sinks make that replay harmless.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from infra.process import ServiceError
from infra.settings import Settings, load_settings
from schemas import cql

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

JOBS = ("archiver", "views")
log = logging.getLogger("pos.speed")


def _progress_writer(settings: Settings) -> tuple[Any, Any]:
    """A cassandra-driver upsert into speed_progress (and the cluster to close)."""
    from cassandra.cluster import Cluster

    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra_port)
    session = cluster.connect(settings.cassandra_keyspace)
    cols = (
        "query_name",
        "batch_id",
        "finished_at",
        "input_rows",
        "input_rows_per_second",
        "processed_rows_per_second",
        "duration_ms",
        "kafka_lag",
        "valid_rows",
        "invalid_rows",
        "resends_absorbed",
        "conflicts",
        "late_receipts",
        "beyond_lateness_bound",
    )

    def write(row: dict[str, Any]) -> None:
        # Partial rows (counts first, rates later) upsert only the columns they carry.
        present = [c for c in cols if c in row]
        session.execute(
            f"INSERT INTO {cql.SPEED_PROGRESS_TABLE} ({', '.join(present)}) "
            f"VALUES ({', '.join('%s' for _ in present)})",
            [row[c] for c in present],
        )

    return write, cluster


def run(settings: Settings, jobs: tuple[str, ...], available_now: bool) -> int:
    from adapters import kafka
    from infra.spark import build_session
    from speed_layer import archiver_job, views_job
    from speed_layer.progress import ProgressRecorder, first_line

    # Spark would fail later with a Java stack trace; say what to do instead.
    kafka.require_topic(settings.bootstrap_servers, settings.topic_transactions)
    spark = build_session(settings, "pos-speed-layer")
    writer, cluster = _progress_writer(settings)
    recorder = ProgressRecorder(settings.speed_status_file, writer)
    spark.streams.addListener(recorder.listener())
    starters: dict[str, Callable[[], StreamingQuery]] = {}
    if "archiver" in jobs:
        starters["archiver"] = lambda: archiver_job.start(spark, settings, available_now)
    if "views" in jobs:
        starters["views"] = lambda: views_job.start(spark, settings, recorder, available_now)
    queries = {job: start() for job, start in starters.items()}
    log.info("started %s (available-now: %s)", ", ".join(starters), available_now)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failures: Counter[str] = Counter()
    failed: str | None = None
    try:
        # Short waits keep the main thread free to receive signals between them.
        while not stop.is_set() and queries:
            spark.streams.awaitAnyTermination(1)
            spark.streams.resetTerminated()
            for job, q in list(queries.items()):
                if q.isActive:
                    if q.lastProgress is not None:
                        failures[job] = 0  # it made progress since its last restart
                    continue
                if q.exception() is None:  # available-now: drained, done
                    del queries[job]
                    continue
                failures[job] += 1
                cause = first_line(q.exception())
                if failures[job] > settings.speed_max_restarts:
                    failed = f"{q.name} failed {failures[job]} times in a row; last: {cause}"
                    stop.set()
                    break
                delay = min(2 ** failures[job], 30)
                log.warning(
                    "%s failed (%s); restarting from its checkpoint in %d s (%d of %d)",
                    q.name, cause, delay, failures[job], settings.speed_max_restarts,
                )  # fmt: skip
                # A retry delay (Cassandra or Kafka coming back), not synchronisation.
                if not stop.wait(delay):
                    queries[job] = starters[job]()
    finally:
        for q in queries.values():
            if q.isActive:
                log.info("stopping %s", q.name)
                q.stop()
        spark.stop()
        cluster.shutdown()
    if failed is not None:
        log.error(
            "%s. Fix the cause and run `pos-speed run` again: it resumes from its "
            "checkpoint under %s.",
            failed,
            settings.checkpoint_dir,
        )
        return 1
    return 0


def status(settings: Settings, as_json: bool) -> int:
    from cassandra.cluster import Cluster, NoHostAvailable

    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra_port)
    try:
        session = cluster.connect(settings.cassandra_keyspace)
    except NoHostAvailable as exc:
        raise ServiceError(f"cannot reach Cassandra: is it running? try `make up` ({exc})") from exc
    try:
        rows = []
        for name in ("pos-speed-archiver", "pos-speed-views"):
            row = session.execute(
                f"SELECT * FROM {cql.SPEED_PROGRESS_TABLE} WHERE query_name = %s LIMIT 1", (name,)
            ).one()
            if row is not None:
                rows.append(row._asdict())
    finally:
        cluster.shutdown()
    if as_json:
        print(json.dumps(rows, default=str, indent=2))
    elif not rows:
        print("no micro-batch recorded yet: start the speed layer with `pos-speed run`")
    for r in [] if as_json else rows:
        print(
            f"{r['query_name']:<20} batch {r['batch_id']} "
            f"at {r['finished_at']:%Y-%m-%d %H:%M:%S}Z: "
            + (
                f"{r['input_rows']} rows, {r['input_rows_per_second']:.0f}/s in, "
                f"{r['processed_rows_per_second']:.0f}/s processed, {r['duration_ms']} ms, "
                f"kafka lag {r['kafka_lag']}"
                if r["input_rows"] is not None
                else "(rates pending)"
            )
            + (
                f", valid {r['valid_rows']}, invalid {r['invalid_rows']}, resends absorbed "
                f"{r['resends_absorbed']}, conflicts {r['conflicts']}, late {r['late_receipts']}"
                if r["valid_rows"] is not None
                else ""
            )
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the streaming jobs")
    run_p.add_argument(
        "--available-now",
        action="store_true",
        help="process everything available in Kafka, then exit",
    )
    run_p.add_argument(
        "--jobs",
        default=",".join(JOBS),
        help=f"comma-separated subset of {', '.join(JOBS)} (default: both)",
    )
    run_p.add_argument("--topic", help="input topic (default: POS_TOPIC_TRANSACTIONS)")
    run_p.add_argument(
        "--trigger-seconds",
        type=float,
        help="micro-batch interval (POS_SPEED_TRIGGER_SECONDS, default 5)",
    )
    run_p.add_argument("--starting-offsets", help="earliest|latest for a new checkpoint")
    run_p.add_argument("--max-offsets-per-trigger", type=int, help="cap on records per micro-batch")
    st = sub.add_parser("status", help="show the last micro-batch of each query")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # py4j logs every callback at INFO; the driver's DC choice is expected on one node.
    for noisy in ("py4j", "cassandra"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if args.command == "status":
            return status(load_settings(), args.json)
        jobs = tuple(j.strip() for j in args.jobs.split(",") if j.strip())
        unknown = sorted(set(jobs) - set(JOBS))
        if unknown or not jobs:
            parser.error(f"--jobs: unknown job(s) {unknown}; choose from {', '.join(JOBS)}")
        try:
            settings = load_settings(
                topic_transactions=args.topic,
                speed_trigger_seconds=args.trigger_seconds,
                speed_starting_offsets=args.starting_offsets,
                speed_max_offsets_per_trigger=args.max_offsets_per_trigger,
            )
        except ValidationError as exc:  # a bad flag or POS_* value
            print(f"error: invalid configuration:\n{exc}", file=sys.stderr)
            return 2
        return run(settings, jobs, args.available_now)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
