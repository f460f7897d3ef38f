"""`pos-batch`: the batch layer's command line (run, data quality, master dataset upkeep).

    pos-batch run --start 2026-03-02T00:00:00Z --end 2026-03-02T01:00:00Z [--lookback-hours 48]
    pos-batch run ... --delta-version 17     # reproduce a run: the same input, the same rows
                                             # (written for inspection; --take-over serves it)
    pos-batch run ... --quality              # then the data-quality check, same session
    pos-batch quality --start ... --end ...  # batch vs speed per store-window -> batch_fixes
    pos-batch rebuild [--chunks 8]           # recompute every day from every record
                                             # (after a validator or winner-rule change)
    pos-batch master optimize | vacuum [--retain-hours H] | history | migrate --from DIR
    pos-batch gc [--grace-hours 3] [--dry-run]   # delete versions nothing points to

Instants are ISO-8601 with an offset (`Z` for UTC), on 15-minute boundaries; the
interval is [start, end), and it must have ended (an end more than two minutes after now
is refused: the run would make windows final before their receipts exist). Prints one
JSON line with the run's bookkeeping and where its time went ("seconds"); with
`--quality`, the check's result under "quality", or its error (the commit stands and
the exit code stays the run's; result or error is recorded on the run's batch_runs
row). Exit codes: 0 done, 2 bad arguments (a future interval among them), 1 the run
failed (recorded as `failed` in batch_runs), 3 another run committed the pointer while
this one computed, and again on each of its `--conflict-retries` immediate recomputes
(each lost try recorded as `conflict`; rerun), 4 nothing to do yet (no master
dataset: the speed layer's archiver has not committed its first micro-batch; `run` and
`rebuild` say so in one line on stderr, before any Spark session starts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pos_lambda import cli_args
from pos_lambda.batch_layer.interval import Interval, IntervalError, parse_instant
from pos_lambda.batch_layer.pointer import CommitConflict, NothingToDo
from pos_lambda.settings import Settings, load_settings

log = logging.getLogger("pos.batch")
T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-batch",
        description="Batch layer: recompute exact views from the master dataset.",
        epilog="exit codes: 0 done, 1 failed, 2 bad arguments, 3 another run committed "
        "first (rerun), 4 nothing to do yet (no master dataset: the speed layer's "
        "archiver creates it with its first micro-batch)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (
        ("run", "recompute the batch views of [start, end) and commit them atomically"),
        ("quality", "compare batch and speed aggregates of [start, end) into batch_fixes"),
    ):
        c = sub.add_parser(name, help=text, description=text)
        c.add_argument("--start", required=True, help="interval start, e.g. 2026-03-02T00:00Z")
        c.add_argument("--end", required=True, help="interval end (exclusive)")
        c.add_argument(
            "--lookback-hours",
            type=float,
            default=None,
            help="recompute whole days back to start minus this (default: "
            "POS_BATCH_LOOKBACK_HOURS, 48)",
        )
        if name == "run":
            c.add_argument(
                "--delta-version",
                type=int,
                default=None,
                help="read the master dataset at this table version (default: the newest); "
                "the version is written for inspection, not served, unless --take-over",
            )
            c.add_argument(
                "--quality",
                action="store_true",
                help="after the commit, run the data-quality check (as `pos-batch quality`) "
                "in the same Spark session and record it on the run's batch_runs row (the "
                "DAG's recompute: one Spark application per DAG run)",
            )
            c.add_argument(
                "--conflict-retries",
                type=cli_args.non_negative_int,
                default=CONFLICT_RETRIES,
                help="when another run commits the pointer first, recompute on what it "
                f"committed at once, in the same Spark session, up to this many times "
                f"(default {CONFLICT_RETRIES}; 0: exit 3 on the first conflict; a run pinned "
                "with --delta-version never retries)",
            )
            c.add_argument(
                "--take-over",
                action="store_true",
                help="with --delta-version: serve this run's version for its days even over "
                "versions read from newer table versions (a deliberate rollback)",
            )
            c.add_argument(
                "--new-table",
                action="store_true",
                help="the master dataset is another Delta table than the one the views count "
                "(a restore, a move): take it over deliberately, a build from it serving "
                "every day (without it such a run stops and says so)",
            )
    r = sub.add_parser(
        "rebuild",
        help="recompute every day from every record, in chunks of natural keys, as a new "
        "generation, then serve it (after a change of the validator or the winner rule)",
        description="The full recompute (batch_layer/rebuild.py). Without --chunk or "
        "--commit: every chunk in turn, then the commit. The DAG pos_batch_rebuild runs "
        "one task per chunk, then the commit.",
    )
    r.add_argument("--chunks", type=int, default=8, help="chunks of natural keys (default 8)")
    r.add_argument(
        "--delta-version",
        type=int,
        default=None,
        help="the master dataset's table version to read (default: the newest; every "
        "chunk and the commit of one rebuild must name the same)",
    )
    step = r.add_mutually_exclusive_group()
    step.add_argument("--chunk", type=int, default=None, help="run only this chunk (0-based)")
    step.add_argument("--commit", action="store_true", help="only sum the chunks and serve")
    r.add_argument(
        "--end",
        default=None,
        help="how far the rebuilt days are final (default: the pointer's horizon; never "
        "in the future)",
    )
    r.add_argument(
        "--rebuild-id",
        default=None,
        type=_rebuild_id,
        help="names the generation every step of one rebuild writes (the DAG's plan draws "
        "one; without --chunk/--commit a new one is drawn); steps run by hand without it "
        "write the table version's own generation, refused once that was served",
    )
    r.add_argument(
        "--new-table",
        action="store_true",
        help="the master dataset is another Delta table than the one the views count (a "
        "restore, a move): take it over deliberately, every day served from it",
    )
    gc = sub.add_parser(
        "gc",
        help="delete batch-view versions nothing points to (killed runs, replaced versions)",
        description="Delete batch-view versions that the pointer does not name and that no "
        "run wrote within the grace period (see src/pos_lambda/batch_layer/cleanup.py).",
    )
    gc.add_argument(
        "--grace-hours",
        type=float,
        default=3.0,
        help="spare versions a run wrote this recently (default 3, above the DAG's 2 h "
        "run timeout)",
    )
    gc.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    m = sub.add_parser("master", help="master dataset (Delta) maintenance")
    msub = m.add_subparsers(dest="action", required=True)
    msub.add_parser("optimize", help="compact small files (OPTIMIZE)")
    v = msub.add_parser("vacuum", help="delete files older versions no longer need (VACUUM)")
    v.add_argument("--retain-hours", type=float, default=None)
    msub.add_parser("history", help="the table's versions (DESCRIBE HISTORY)")
    g = msub.add_parser("migrate", help="append an old Parquet master dataset into Delta")
    g.add_argument("--from", dest="source", required=True, help="the Parquet directory")
    return p


def _rebuild_id(text: str) -> str:
    if not re.fullmatch(r"[0-9a-z]{1,16}", text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: 1 to 16 lowercase letters and digits (it names a generation)"
        )
    return text


def _interval(args: argparse.Namespace, settings: Settings) -> Interval:
    hours = settings.batch.lookback_hours if args.lookback_hours is None else args.lookback_hours
    return Interval(parse_instant(args.start), parse_instant(args.end), timedelta(hours=hours))


def _emit(value: Any) -> None:
    print(json.dumps(value, default=str), flush=True)


EXIT_CONFLICT = 3
CONFLICT_RETRIES = 2  # a lost commit is recomputed at once (see until_committed)
EXIT_NOTHING_TO_DO = 4


def main(argv: list[str] | None = None) -> int:
    began = time.monotonic()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = _parser()
    args = parser.parse_args(argv)
    settings = load_settings()
    interval = None
    if args.command in ("run", "quality"):
        try:
            interval = _interval(args, settings)
            if args.command == "run":
                interval.ensure_ended(datetime.now(UTC))
        except IntervalError as exc:
            parser.error(str(exc))
        if args.command == "run" and args.take_over and args.delta_version is None:
            parser.error("--take-over needs --delta-version (it serves a pinned rerun)")
        if (
            args.command == "run"
            and args.quality
            and args.delta_version is not None
            and not args.take_over
        ):
            parser.error("--quality checks the served views; a pinned run serves nothing")
    if args.command == "gc":
        return _gc(settings, args)
    if args.command == "rebuild":
        if args.chunks < 1:
            parser.error("--chunks must be at least 1")
        if args.chunk is not None and not 0 <= args.chunk < args.chunks:
            parser.error(f"--chunk must be in 0..{args.chunks - 1}")
        if (args.chunk is not None or args.commit) and args.delta_version is None:
            parser.error("--chunk and --commit need --delta-version (all steps read one version)")
        if args.end is not None:
            try:
                args.end = parse_instant(args.end)
                Interval(args.end - timedelta(minutes=15), args.end).ensure_ended(datetime.now(UTC))
            except IntervalError as exc:
                parser.error(
                    str(exc).replace("a batch run makes its interval", "a rebuild makes it")
                )
    if args.command in ("run", "rebuild"):
        from pos_lambda.adapters import master_dataset

        # Before the JVM starts: the answer is in the Delta log's file names, and a user
        # (or the DAG's log) gets one line instead of a session's start-up and Delta's
        # "is not a Delta table".
        missing = master_dataset.missing(settings)
        if missing is not None:
            return _nothing_to_do(args.command, missing)
    from pos_lambda.adapters.spark_session import build_session

    if args.command in ("run", "quality"):  # bounded runs on a cold JVM: C1 only (settings)
        settings = settings.bounded()
    spark = build_session(settings, f"pos-batch-{args.command}")
    # Where a run's time goes, printed with it: the session's start (the JVM's among
    # it) is the fixed cost a small run pays (bench/batch_dag.py).
    seconds = {"session": time.monotonic() - began}
    try:
        if args.command == "run":
            from pos_lambda.batch_layer import job

            assert interval is not None
            lap = time.monotonic()
            retries = 0 if args.delta_version is not None else args.conflict_retries
            result = until_committed(
                lambda: job.run(
                    spark, settings, interval, args.delta_version, args.take_over, args.new_table
                ),
                retries,
            )
            done = dataclasses.asdict(result)
            seconds["run"] = time.monotonic() - lap
            if args.quality:
                from pos_lambda.batch_layer import quality

                lap = time.monotonic()
                # Never raises: a failed check leaves the commit standing and exit 0,
                # recorded for the DAG's quality task to fail on (quality.after_run).
                done["quality"] = quality.after_run(spark, settings, interval, result.run_id)
                seconds["quality"] = time.monotonic() - lap
            _emit({**done, "seconds": {k: round(v, 3) for k, v in seconds.items()}})
        elif args.command == "rebuild":
            _rebuild(spark, settings, args)
        elif args.command == "quality":
            from pos_lambda.batch_layer import quality

            assert interval is not None
            _emit(dataclasses.asdict(quality.check(spark, settings, interval)))
        else:
            _master(spark, settings, args)
    except CommitConflict as exc:
        log.error("pos-batch %s: %s", args.command, exc)
        return EXIT_CONFLICT
    except NothingToDo as exc:  # the table went away after the check above
        return _nothing_to_do(args.command, str(exc))
    except Exception as exc:
        log.error("pos-batch %s failed: %s", args.command, exc)
        return 1
    finally:
        spark.stop()
    return 0


def until_committed(run_once: Callable[[], T], retries: int) -> T:
    """`run_once()`, run again at once, up to `retries` times, while it loses the
    pointer's compare-and-set to another run (`CommitConflict`): optimistic concurrency's
    retry. Each try reads the pointer afresh, so it builds on what the winner committed,
    as a scheduler's retry would, without its delay and a new JVM."""
    for attempt in range(retries + 1):
        try:
            return run_once()
        except CommitConflict as exc:
            if attempt == retries:
                raise
            log.warning(
                "pos-batch run: %s; recomputing on what it committed (retry %d of %d)",
                exc,
                attempt + 1,
                retries,
            )
    raise AssertionError("unreachable")


def _nothing_to_do(command: str, reason: str) -> int:
    """One line on stderr saying what is missing and what creates it, the JSON line on
    stdout, and the exit code a scheduler can tell from a failure."""
    print(f"pos-batch {command}: nothing to do yet: {reason}", file=sys.stderr, flush=True)
    _emit({"nothing_to_do": reason})
    return EXIT_NOTHING_TO_DO


def _rebuild(spark: Any, settings: Settings, args: argparse.Namespace) -> None:
    from pos_lambda.adapters import master_dataset
    from pos_lambda.batch_layer import rebuild

    rebuild_id = args.rebuild_id
    if not args.commit and args.chunk is not None:
        one = rebuild.run_chunk(
            spark, settings, args.delta_version, args.chunk, args.chunks, rebuild_id
        )
        _emit(dataclasses.asdict(one))
        return
    if not master_dataset.exists(spark, settings):
        raise NothingToDo(f"no master dataset at {settings.master_dataset_dir} yet")
    version = args.delta_version
    if version is None:
        version = master_dataset.latest_version(spark, settings)
    if not args.commit:
        rebuild_id = rebuild_id or rebuild.new_rebuild_id()  # every step in this process
        for chunk in range(args.chunks):
            one = rebuild.run_chunk(spark, settings, version, chunk, args.chunks, rebuild_id)
            _emit(dataclasses.asdict(one))
    _emit(
        rebuild.commit(spark, settings, version, args.chunks, args.end, rebuild_id, args.new_table)
    )


def _gc(settings: Settings, args: argparse.Namespace) -> int:
    """Plain CQL, no Spark session: it only lists partitions and deletes some."""
    from pos_lambda.batch_layer import cleanup
    from pos_lambda.batch_layer.pointer import BatchStore

    if args.grace_hours < 0:
        print("pos-batch gc: --grace-hours must not be negative", file=sys.stderr)
        return 2
    try:
        with BatchStore(settings) as store:
            _emit(
                cleanup.collect(
                    store, datetime.now(UTC), timedelta(hours=args.grace_hours), args.dry_run
                )
            )
    except Exception as exc:
        log.error("pos-batch gc failed: %s", exc)
        return 1
    return 0


def _master(spark: Any, settings: Settings, args: argparse.Namespace) -> None:
    from pos_lambda.adapters import master_dataset as md

    if args.action == "optimize":
        _emit(md.optimize(spark, settings))
    elif args.action == "vacuum":
        hours = args.retain_hours or settings.batch.vacuum_retain_hours
        _emit({"files": md.vacuum(spark, settings, hours), "retain_hours": hours})
    elif args.action == "history":
        _emit(md.history(spark, settings))
    else:
        _emit({"migrated_rows": md.migrate_parquet(spark, settings, args.source)})


if __name__ == "__main__":
    sys.exit(main())
