"""`pos-speed`: run the speed layer's streaming jobs, or show their progress.

    pos-speed run                  # archiver + views, continuous until SIGTERM/Ctrl-C
    pos-speed run --available-now  # process everything in Kafka now, then exit
    pos-speed status               # last micro-batch of each query (from Cassandra)
    pos-speed replay-dead-letters --reason R --since T [--dry-run]   # after a fix

Each query is named and has its own checkpoint under <data_dir>/checkpoints. In local
mode each runs in a Spark application (a driver process) of its own, the archiver's at
a lower CPU priority, so that it never delays the views users wait on; on a cluster
master both share one driver (POS_SPEED_DRIVERS). A query that fails (Cassandra or Kafka
unreachable) is started again inside its driver once they answer, keeping the JVM
(POS_SPEED_QUERY_RESTARTS_IN_PLACE, speed_layer/in_place.py). `pos-speed run` supervises
its drivers: a driver that dies (past those restarts, exiting with the root cause in one
line; or it is killed, by any signal) is started again from its
checkpoints, at once the first time, then after a growing backoff, at most
POS_SPEED_MAX_RESTARTS times within POS_SPEED_RESTART_WINDOW_SECONDS; past that budget
it stops the others and `pos-speed run` exits 1. A driver dies with its supervisor.
With POS_SPEED_STANDBY, a standby driver, started and warmed up, waits beside each driver
and takes over from the checkpoint when it dies (a restart all the same).
Stopping is graceful: on SIGTERM the queries are stopped and the sessions closed, and
`pos-speed run` exits 0; anything half-done is replayed from the checkpoint on the next
start, and the sinks make that replay harmless.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from pos_lambda.adapters.service import ServiceError
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings, explain, load_settings
from pos_lambda.speed_layer.restart_policy import EXIT_RETRY
from pos_lambda.speed_layer.supervisor import (
    GO_FD_ENV,
    TOOK_OVER_NAME,
    Word,
    die_with_supervisor,
    drivers_for,
    hear_word,
    name_this_process,
    report_ready,
    report_standing_by,
    supervise,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from pos_lambda.adapters.cassandra_client import OpenSession

JOBS = ("archiver", "views")
log = logging.getLogger("pos.speed")


def _progress_writer(settings: Settings) -> tuple[Any, OpenSession]:
    """A cassandra-driver upsert into speed_progress (and the session to close)."""
    from pos_lambda.adapters import cassandra_client

    opened = cassandra_client.open_session(settings, writes=True)
    session = opened.session
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

    statements: dict[tuple[str, ...], Any] = {}

    def write(row: dict[str, Any]) -> None:
        # Partial rows (counts first, rates later) upsert only the columns they carry.
        present = tuple(c for c in cols if c in row)
        if present not in statements:
            # Marked idempotent (a plain upsert), so speculated: the micro-batch waits for
            # this write, and a frozen coordinator held it the whole request timeout.
            statements[present] = cassandra_client.prepare_idempotent(
                session,
                f"INSERT INTO {cql.SPEED_PROGRESS_TABLE} ({', '.join(present)}) "
                f"VALUES ({', '.join('?' for _ in present)})",
            )
        session.execute(statements[present], [row[c] for c in present])

    return write, opened


def run(
    settings: Settings, jobs: tuple[str, ...], available_now: bool, standby: bool = False
) -> int:
    """One Spark application running the jobs; EXIT_RETRY when a query failed. A
    `standby` first waits for its supervisor's word (`stand_by`)."""
    from pyspark.errors import StreamingQueryException

    from pos_lambda.adapters import cassandra, kafka_admin
    from pos_lambda.adapters.spark_session import build_session
    from pos_lambda.speed_layer import archiver_job, views_job
    from pos_lambda.speed_layer.progress import ProgressRecorder, first_line

    word = hear_word() if standby else None  # listening before the slow start-up
    # Spark would fail later with a Java stack trace; say what to do instead.
    kafka_admin.require_topic(
        settings.bootstrap_servers,
        settings.topics.transactions,
        security=settings.kafka.security_config,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # Both queries: "pos-speed-layer"; one: its query's name (per-query drivers).
    spark = build_session(
        settings, "pos-speed-layer" if len(jobs) > 1 else cql.SPEED_QUERY_OF_JOB[jobs[0]]
    )
    progress: OpenSession | None = None
    queries: list[StreamingQuery] = []
    failed: str | None = None
    in_place_at: list[float] = []  # when this driver restarted a failed query in place
    try:
        if word is not None:
            if not stand_by(spark, settings, jobs, word, stop):
                return 0  # nothing started: nothing to stop but the session (below)
            # Its warm-up is done (or cut short): as a restarted driver, straight to the replay.
            settings = settings.with_overrides(speed_warm_up=False)
        writer, progress = _progress_writer(settings)
        recorder = ProgressRecorder(settings.speed_status_file, writer)
        spark.streams.addListener(recorder.listener())
        starters: dict[str, Callable[[], StreamingQuery]] = {}
        if "archiver" in jobs:
            starters[archiver_job.QUERY_NAME] = lambda: archiver_job.start(
                spark, settings, available_now
            )
        if "views" in jobs:
            starters[views_job.QUERY_NAME] = lambda: views_job.start(
                spark, settings, recorder, available_now
            )
        queries = [start_query() for start_query in starters.values()]
        log.info("started %s (available-now: %s)", ", ".join(jobs), available_now)
        report_ready()
        # Short waits keep the main thread free to receive signals between them.
        while not stop.is_set() and any(q.isActive for q in queries):
            with contextlib.suppress(StreamingQueryException):  # examined just below
                spark.streams.awaitAnyTermination(1)
            spark.streams.resetTerminated()
            broken = [q for q in queries if not q.isActive and q.exception() is not None]
            if not broken:
                continue
            failed = f"{broken[0].name} failed: {first_line(broken[0].exception())}"
            if available_now or not _restart_in_place(settings, in_place_at, failed, stop):
                if stop.is_set():  # stopped while it waited: a stop, resumed from the checkpoint
                    failed = None
                break
            # Fresh connector sessions for the restarted query: a cached one that lived
            # through a Cassandra restart could block for good in a schema refresh.
            cassandra.close_idle_sessions(spark)
            for i, q in enumerate(queries):  # keep the JVM: the failed ones, again
                if q in broken:
                    queries[i] = starters[q.name]()
                    recorder.restarted_in_place(q.name)  # pos_speed_query_restarts_total
            failed = None
    except Exception as exc:  # e.g. Cassandra unreachable while the queries start
        failed = f"could not start: {first_line(exc)}"
    finally:
        for q in queries:
            if q.isActive:
                log.info("stopping %s", q.name)
                q.stop()
            if q.name == archiver_job.QUERY_NAME:
                archiver_job.commit_last(settings, q)
        spark.stop()
        if progress is not None:
            progress.close()
    if failed is not None:
        log.error("%s", failed)
        return EXIT_RETRY
    return 0


def _restart_in_place(
    settings: Settings, failures_at: list[float], failed: str, stop: threading.Event
) -> bool:
    """Whether to start the failed query again in this driver (speed_layer/in_place.py):
    within the budget, once Cassandra and Kafka answer. Records the restart."""
    from pos_lambda.speed_layer import in_place

    now = time.monotonic()
    speed = settings.speed
    limit, window = speed.query_restarts_in_place, speed.restart_window_seconds
    if not in_place.allowed(failures_at, now, limit, window):
        log.warning("%s; %d restart(s) in place within %.0f s: a fresh driver", failed,
                    limit, window)  # fmt: skip
        return False
    log.warning("%s; restarting it in this driver once Cassandra and Kafka answer", failed)
    answered = in_place.await_services(
        lambda: _services_missing(settings),
        stop.is_set,
        speed.query_restart_wait_seconds,
        time.monotonic,
        stop.wait,
    )
    if answered:
        failures_at.append(now)
        log.info("services answer %.1f s after the failure: restarting the query from its "
                 "checkpoint (%d of %d in place)", time.monotonic() - now, len(failures_at),
                 limit)  # fmt: skip
    return answered


def _services_missing(settings: Settings) -> str | None:
    """None when Cassandra answers a query and Kafka lists the input topic; else which
    one does not, and why."""
    from pos_lambda.adapters import cassandra_client, kafka_admin

    try:
        with cassandra_client.open_session(settings, keyspace=False, timeout=2.0) as session:
            session.execute("SELECT release_version FROM system.local")
    except Exception as exc:  # NoHostAvailable, OperationTimedOut, ...
        return f"Cassandra does not answer ({type(exc).__name__})"
    try:
        kafka_admin.require_topic(
            settings.bootstrap_servers,
            settings.topics.transactions,
            timeout_s=2.0,
            security=settings.kafka.security_config,
        )
    except Exception as exc:  # ServiceError, KafkaException
        return f"Kafka does not answer ({type(exc).__name__})"
    return None


def stand_by(
    spark: SparkSession,
    settings: Settings,
    jobs: tuple[str, ...],
    word: Word,
    stop: threading.Event,
) -> bool:
    """A standby driver's wait, its session built: warm up (as a driver would before its
    query, cut short once the word comes), close every connection, say `standing by`,
    then wait. True once told to go; False when told to stand down, or stopped.

    Nothing here touches the query's checkpoint, Kafka or the views: the queries, the
    progress listener and the sessions they use start after the word, in `run`. Holding
    no connection while it waits, a standby that lived through a Cassandra or Kafka
    restart takes over with fresh ones.
    """
    from pos_lambda.adapters import cassandra
    from pos_lambda.speed_layer import archiver_job, views_job

    def cut_short() -> bool:
        return word.heard.is_set() or stop.is_set()

    if settings.speed.warm_up:
        if "archiver" in jobs and not cut_short():
            archiver_job.run_warm_up(spark, settings, cut_short)
        if "views" in jobs and not cut_short():
            views_job.run_warm_up(spark, settings, cut_short)
    if not cut_short():
        cassandra.close_idle_sessions(spark)
        report_standing_by()
        log.info("standby for %s standing by: it takes over when its driver dies", ", ".join(jobs))
    while not stop.is_set():  # short waits: the main thread takes the signals
        if word.heard.wait(1):
            if not word.go:
                log.info("standby for %s told to stand down", ", ".join(jobs))
                return False
            name_this_process(TOOK_OVER_NAME)  # before anything starts: `ps` says driver
            log.info("standby for %s takes over: starting from the checkpoints", ", ".join(jobs))
            return True
    return False


def status(settings: Settings, as_json: bool) -> int:
    from cassandra.cluster import NoHostAvailable

    from pos_lambda.adapters import cassandra_client

    try:
        opened = cassandra_client.open_session(settings)
    except NoHostAvailable as exc:
        raise ServiceError(f"cannot reach Cassandra: is it running? try `make up` ({exc})") from exc
    with opened as session:
        rows = []
        for name in cql.SPEED_QUERY_OF_JOB.values():
            row = session.execute(
                f"SELECT * FROM {cql.SPEED_PROGRESS_TABLE} WHERE query_name = %s LIMIT 1", (name,)
            ).one()
            if row is not None:
                rows.append(row._asdict())
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
        help="micro-batch interval of the views query (POS_SPEED_TRIGGER_SECONDS, default 5)",
    )
    run_p.add_argument(
        "--archive-trigger-seconds",
        type=float,
        help="micro-batch interval of the archiver (POS_SPEED_ARCHIVE_TRIGGER_SECONDS, default 30)",
    )
    run_p.add_argument("--starting-offsets", help="earliest|latest for a new checkpoint")
    run_p.add_argument("--max-offsets-per-trigger", type=int, help="cap on records per micro-batch")
    # The supervisor starts each driver (a Spark application) with this flag, and each
    # standby (POS_SPEED_STANDBY) with --standby too.
    run_p.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    run_p.add_argument("--standby", action="store_true", help=argparse.SUPPRESS)
    st = sub.add_parser("status", help="show the last micro-batch of each query")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    from pos_lambda.speed_layer import replay

    rp = sub.add_parser(
        "replay-dead-letters",
        help="send dead letters of a reason again to the input topic (after a fix)",
        description=replay.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=REPLAY_EXAMPLES,
    )
    rp.add_argument(
        "--reason",
        required=True,
        help="a reason code (bad_price), or code:field.path to narrow it "
        "(missing_field:transactions); an unknown one lists the valid reasons",
    )
    rp.add_argument(
        "--since",
        required=True,
        help="dead letters of records Kafka received at or after this: an ISO-8601 instant "
        "with an offset (2026-03-02T08:00Z) or a duration back from now (90m, 24h, 7d)",
    )
    rp.add_argument("--dry-run", action="store_true", help="list what would be sent; send nothing")
    rp.add_argument("--topic", help="the input topic to send to (default: POS_TOPIC_TRANSACTIONS)")
    return parser


REPLAY_EXAMPLES = """examples:
  pos-speed replay-dead-letters --reason bad_price --since 24h --dry-run   # look first
  pos-speed replay-dead-letters --reason bad_price --since 24h
  pos-speed replay-dead-letters --reason missing_field:transactions --since 2026-03-02T00:00Z

Prints one JSON summary line (selected, sent or would_send, from_master_dataset, ...);
--dry-run prints a line per record before it. Exit codes: 0 done, 1 some dead letters
could not be resolved to their whole value (named on stderr; the others were sent),
2 a bad --reason or --since."""


def _replay_dead_letters(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from pos_lambda.speed_layer import replay

    try:
        reason = replay.parse_reason(args.reason)
        since = replay.parse_since(args.since, datetime.now(UTC))
    except replay.SelectionError as exc:
        print(f"pos-speed replay-dead-letters: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load_settings(topic_transactions=args.topic)
    except ValidationError as exc:
        print(f"error: invalid configuration:\n{_explained(exc)}", file=sys.stderr)
        return 2
    return replay.replay(settings, reason, since, args.dry_run)


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
        if args.command == "replay-dead-letters":
            return _replay_dead_letters(args)
        jobs = tuple(j.strip() for j in args.jobs.split(",") if j.strip())
        unknown = sorted(set(jobs) - set(JOBS))
        if unknown or not jobs:
            parser.error(f"--jobs: unknown job(s) {unknown}; choose from {', '.join(JOBS)}")
        if args.standby and (not args.driver or args.available_now or GO_FD_ENV not in os.environ):
            parser.error("--standby: only `pos-speed run` starts standbys (POS_SPEED_STANDBY)")
        try:
            settings = load_settings(
                topic_transactions=args.topic,
                speed_trigger_seconds=args.trigger_seconds,
                speed_archive_trigger_seconds=args.archive_trigger_seconds,
                speed_starting_offsets=args.starting_offsets,
                speed_max_offsets_per_trigger=args.max_offsets_per_trigger,
            )
        except ValidationError as exc:  # a bad flag or POS_* value
            print(f"error: invalid configuration:\n{_explained(exc)}", file=sys.stderr)
            return 2
        if args.driver:
            die_with_supervisor()
            if args.available_now:  # a bounded run on a cold JVM: C1 only (settings)
                settings = settings.bounded()
            return run(settings, jobs, args.available_now, standby=args.standby)
        from pos_lambda.adapters import cassandra_client, kafka_admin

        # Once, before any driver starts: what no restart can fix is said once, at once.
        cassandra_client.require_keyspace(settings)
        kafka_admin.require_topic(
            settings.bootstrap_servers,
            settings.topics.transactions,
            security=settings.kafka.security_config,
        )
        return supervise(
            settings,
            drivers_for(settings, jobs, args.available_now),
            argv if argv is not None else sys.argv[1:],
            serve_metrics=not args.available_now,  # a one-shot run is not scraped
            one_shot=args.available_now,  # its drivers' exit 0: done
        )
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


def _explained(exc: Exception) -> str:
    return explain(exc) if isinstance(exc, ValidationError) else str(exc)
