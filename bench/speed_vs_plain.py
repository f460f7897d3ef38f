"""The speed layer vs the plain Python consumer, same topic, same run.

    python -m bench.speed_vs_plain [--count 50000] [--warmup 200000] [--rounds 2] [--baseline REV]

Produces one topic of simulated receipts with faults (resends, malformed, late;
the producer's ledger beside it; `--warmup` receipts, then `--count` more), then
alternates, `--rounds` times (in this order, then in reverse, so that no contender
always runs right after the same one):
  - the plain consumer (bench/plain_consumer.py, the alternative a user might write),
  - one-shot, cold: `pos-speed run --available-now --jobs views` (the views query alone,
    one micro-batch) and `pos-speed run --available-now` (both queries, archiver and
    views, as `make demo` runs them: one micro-batch each, in a driver each locally),
    each a fresh JVM whose one micro-batch pays for class loading, JIT compilation and
    Spark's first code generation;
  - running, warm: the same two as a running speed layer (`pos-speed run`, as `make
    speed` runs it) catching up the stream's messages after the `--warmup` first ones,
    taken in steps of 25,000 (see `run_speed_warm`), which is what a stream processor's
    throughput means once it runs;
and with `--baseline REV` both one-shot contenders again with the code at REV (a git
worktree, this checkout's jars and services), each into a fresh keyspace of its own,
and checks each keyspace against the ledger: a run counts only when its views are
exact. Reports events/s of each and the ratios to the plain consumer: the plain
consumer from its first message to its last write; the one-shot views query's
processed rows/s of its micro-batch (from its progress); the others: messages / the
span from the first micro-batch's start to the last one's end. JVM start-up is excluded
on every side. Over the same spans it reports where the CPU went (bench/cpu_meter.py):
busy core-ms per 1,000 events, machine-wide, with Cassandra's and Kafka's own share and
the core time left idle, and each speed contender's busy core-ms against the most its
goal allows on this machine's cores (all cores busy): a contender over that budget cannot
reach its goal by keeping the cores busier, only by doing less work. Needs `make up`;
drops its keyspaces and topics at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from bench import harness, results, revisions
from bench.cpu_meter import CpuMeter, needed_core_ms_per_1k
from bench.faulted_topic import produce_faulted_topic
from bench.harness import ONE_BATCH, QUERY_OF_JOB, ProgressReader, SpeedLayer, check_ledger, drop
from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import wait_for
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings, load_settings

# The running contenders' warm-up (see run_speed_warm): the stream's first messages,
# taken in micro-batches of WARMUP_STEP before the measured rest. A JVM gets faster over
# its first large micro-batches (the JIT compiles Spark's generated code and the
# connector's hot loops). A running views query fed 25,000 messages at a time took 22.2,
# 11.9, 9.8, 8.5, 8.2, 9.5, 6.9, 7.6 s for its first eight micro-batches, then 6.3-7.9 s
# (median 7.0) for the next eight: steady after about 200,000 messages.
WARMUP_MESSAGES = 200_000
WARMUP_STEP = 25_000


def _env(settings: Settings, keyspace: str, data: Path) -> dict[str, str]:
    return harness.pipeline_env(keyspace, data, settings.topics.transactions, extra=ONE_BATCH)


def run_plain(settings: Settings, keyspace: str, ledger: Path) -> dict[str, Any]:
    argv, cwd = revisions.bench("plain_consumer", "--topic", settings.topics.transactions,
                                "--keyspace", keyspace, "--ledger", str(ledger))  # fmt: skip
    env = _env(settings, keyspace, Path(tempfile.gettempdir()))
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"plain consumer failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _span(batches: list[dict[str, Any]]) -> tuple[datetime, datetime]:
    """From the first micro-batch's start to the last one's end."""
    ends = [datetime.fromisoformat(b["finished_at"]) for b in batches]
    starts = [end - timedelta(milliseconds=b["duration_ms"]) for end, b in zip(ends, batches)]  # noqa: B905 - same length
    return min(starts), max(ends)


def _span_s(batches: list[dict[str, Any]]) -> float:
    """Seconds from the first micro-batch's start to the last one's end."""
    start, end = _span(batches)
    return (end - start).total_seconds()


def cpu_per_1k(meter: CpuMeter, out: dict[str, Any]) -> dict[str, float]:
    """A contender's CPU over its measured span (the plain consumer's first message to its
    last write; the micro-batches'), in core-ms per 1,000 of the messages it measured."""
    if "started_at" in out:
        start, end = float(out["started_at"]), float(out["ended_at"])
    else:
        first, last = _span(out["batches"])
        start, end = first.timestamp(), last.timestamp()
    return meter.between(start, end).per_1k(int(out["messages"]))


def cpu_summary(cpu: dict[str, float]) -> str:
    parts = ", ".join(f"{name} {cpu[name]:,.0f}" for name in cpu if name not in ("busy", "idle"))
    return f"core-ms per 1k events: busy {cpu['busy']:,.0f} ({parts}), idle {cpu['idle']:,.0f}"


def run_speed(
    settings: Settings, keyspace: str, ledger: Path, jobs: str, tree: Path | None = None
) -> dict[str, Any]:
    """`pos-speed run --available-now` with `jobs` ("views" or "archiver,views"), of
    this checkout or of the code in `tree` (another revision's worktree); `process_s`:
    the whole process's time, its JVM's start included."""
    data = Path(tempfile.mkdtemp(prefix="bench-svp-"))
    try:
        schema_apply.apply_cql(settings, keyspace)
        started = time.monotonic()
        status = harness.speed_once(settings.topics.transactions, keyspace, data, jobs, tree)
        process_s = time.monotonic() - started
    finally:
        shutil.rmtree(data, ignore_errors=True)
    batches = [status[QUERY_OF_JOB[job]] for job in jobs.split(",")]
    views = status[QUERY_OF_JOB["views"]]
    problems = check_ledger(settings, keyspace, ledger)
    seconds = _span_s(batches)
    return {
        "messages": views.get("input_rows"),
        "events_per_second": (
            float(views["processed_rows_per_second"])
            if jobs == "views"
            else int(views["input_rows"]) / seconds
        ),
        "seconds": seconds,
        "process_s": round(process_s, 1),
        "batches": batches,
        "exact": not problems,
        "problems": problems,
    }


def run_speed_warm(
    settings: Settings,
    keyspace: str,
    ledger: Path,
    jobs: str,
    messages: list[OutgoingMessage],
    topics: list[str],
    warmup: int = WARMUP_MESSAGES,
) -> dict[str, Any]:
    """A running speed layer catching up a backlog: `pos-speed run --jobs JOBS` (no
    --available-now; both queries every 5 s, the views query's default interval) on a
    topic of its own, fed the stream's first `warmup` messages WARMUP_STEP at a time,
    each step awaited; once its micro-batches have taken those (the JVM's class
    loading, JIT and code generation done, as in any speed layer that has run for a
    while), the rest of the stream is produced at once and the micro-batches that take
    it are measured: messages / their span. The views are checked against the ledger of
    the whole stream."""
    topic = f"{settings.topics.transactions}.warm.{uuid.uuid4().hex[:6]}"
    topics.append(topic)
    warm = settings.with_overrides(**{"topic_transactions": topic})
    schema_apply.create_topics(settings, {topic: settings.topics.partitions})
    schema_apply.apply_cql(settings, keyspace)
    names = tuple(QUERY_OF_JOB[job] for job in jobs.split(","))
    data = Path(tempfile.mkdtemp(prefix="bench-svp-warm-"))
    env = {**_env(warm, keyspace, data), "POS_SPEED_TRIGGER_SECONDS": "5",
           "POS_SPEED_ARCHIVE_TRIGGER_SECONDS": "5"}  # fmt: skip
    security = settings.kafka.security_config

    def taken(layer: SpeedLayer, progress: ProgressReader, n: int) -> Callable[[], bool]:
        def done() -> bool:
            if layer.proc.poll() is not None:
                raise SystemExit(f"pos-speed exited {layer.proc.returncode}:\n{layer.tail()}")
            rows = progress.rows()
            return all(sum(int(r["input_rows"] or 0) for r in rows if r["query_name"] == q) >= n
                       for q in names)  # fmt: skip

        return done

    try:
        layer = SpeedLayer(env, ["--jobs", jobs], data / "speed.log")
        with ProgressReader(settings, keyspace) as progress:
            try:
                layer.await_started(300, names)
                for start in range(0, warmup, WARMUP_STEP):
                    end = min(start + WARMUP_STEP, warmup)
                    produce(messages[start:end], settings.bootstrap_servers, topic, quiet=True,
                            security=security)  # fmt: skip
                    if not wait_for(taken(layer, progress, end), timeout=600, interval=0.5):
                        raise SystemExit(f"warm-up not processed in 600 s:\n{layer.tail()}")
                    print(f"  warm-up: {end:,} of {warmup:,} messages taken", flush=True)
                warmed = {(r["query_name"], r["batch_id"]) for r in progress.rows()}
                produce(messages[warmup:], settings.bootstrap_servers, topic,
                        quiet=True, security=security)  # fmt: skip
                if not wait_for(taken(layer, progress, len(messages)), timeout=900,
                                interval=0.5):  # fmt: skip
                    raise SystemExit(f"backlog not processed in 900 s:\n{layer.tail()}")
            finally:
                layer.stop()
            recorded = progress.rows()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    batches = [
        {**r, "finished_at": r["finished_at"].replace(tzinfo=UTC).isoformat()}
        for r in recorded
        if (r["query_name"], r["batch_id"]) not in warmed and r["input_rows"]
    ]
    backlog = len(messages) - warmup
    seconds = _span_s(batches)
    problems = check_ledger(settings, keyspace, ledger)
    return {
        "messages": backlog,
        "events_per_second": backlog / seconds,
        "seconds": seconds,
        "batches": batches,
        "exact": not problems,
        "problems": problems,
    }


def cpu_figures(
    runs: dict[str, list[dict[str, Any]]],
    plain: float,
    goals: dict[str, float],
    labels: dict[str, str],
    issue: str,
) -> list[results.Figure]:
    """The goals in CPU terms: each speed contender's busy core-ms per 1,000 events (all
    cores, the services' share included; medians) against the most its goal allows on
    this machine's cores even with every core busy (needed_core_ms_per_1k); and the
    plain consumer's, with the core time it leaves idle."""
    cores = os.cpu_count() or 1

    def median(name: str, part: str) -> float:
        return float(statistics.median(r["cpu_core_ms_per_1k"][part] for r in runs[name]))

    figures = []
    unit = "core-ms per 1k events"
    for name, label in labels.items():
        goal = goals[name.split(",")[0]]
        allowed = f"the most {goal}x the plain consumer allows on {cores} cores"
        budget = needed_core_ms_per_1k(cores, goal, plain)
        met = results.Goal("<=", 1.0, issue)
        figures.append(
            results.vs_peer(f"{label}: CPU", median(name, "busy"), unit, allowed, budget, met)
        )
        if "cassandra" in runs[name][0]["cpu_core_ms_per_1k"]:
            share = median(name, "cassandra")
            figures.append(results.baseline(f"{label}: CPU, Cassandra's share", share, unit))
    figures += [
        results.baseline(f"plain consumer: CPU, {part}", median("plain", part), unit)
        for part in ("busy", "idle")
    ]
    return figures


def main() -> None:
    parser = harness.parser(__doc__, "speed_vs_plain")
    parser.add_argument(
        "--count", type=int, default=50_000,
        help="unique receipts the running contenders are measured on (after the warm-up)",
    )  # fmt: skip
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_MESSAGES, metavar="N",
        help=f"the running contenders' warm-up: the stream's first N messages, taken "
        f"{WARMUP_STEP:,} at a time; the stream has N + COUNT receipts, and the plain "
        "consumer and the one-shot contenders read all of them",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run both speed contenders with the project's code at this git revision "
        "(e.g. HEAD~1): what a change buys, side by side",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        baseline = stack.enter_context(revisions.code_at(args.baseline)) if args.baseline else None
        compare(args, baseline)


def compare(args: argparse.Namespace, baseline: tuple[str, Path] | None) -> None:
    """Alternating contenders on one faulted topic; the report (see the module doc)."""
    # Receipts enough for the running contenders' warm-up and then `count` measured.
    settings, result = produce_faulted_topic(load_settings(), "bench.svp", args.count + args.warmup)
    ledger = Path(tempfile.mkdtemp(prefix="bench-svp-ledger-"))
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    summary = result.summary
    print(f"{len(result.messages)} messages in {settings.topics.transactions} "
          f"({summary.get('faults', summary)})", flush=True)  # fmt: skip

    topics: list[str] = []
    warm = partial(run_speed_warm, messages=result.messages, topics=topics, warmup=args.warmup)
    contenders: dict[str, Callable[[Settings, str, Path], dict[str, Any]]] = {
        "plain": run_plain,
        "views": partial(run_speed, jobs="views"),
        "both": partial(run_speed, jobs="archiver,views"),
        "views, warm": partial(warm, jobs="views"),
        "both, warm": partial(warm, jobs="archiver,views"),
    }
    if baseline:
        name, tree = baseline
        contenders[f"views, {name}"] = partial(run_speed, jobs="views", tree=tree)
        contenders[f"both, {name}"] = partial(run_speed, jobs="archiver,views", tree=tree)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    keyspaces: list[str] = []
    try:
        # The local services' own CPU, beside the machine's.
        with CpuMeter(harness.service_pids(settings)) as meter:
            # Every other round in reverse order: no contender always runs right after the
            # same one.
            for rnd, (name, run) in harness.alternate(
                args.rounds, contenders.items(), reverse_odd=True
            ):
                ks = f"bench_svp_{name.split(',')[0]}_{uuid.uuid4().hex[:6]}"
                keyspaces.append(ks)
                out = run(settings, ks, ledger)
                out["cpu_core_ms_per_1k"] = cpu_per_1k(meter, out)
                runs[name].append(out)
                verdict = "exact" if out["exact"] else f"NOT EXACT {out['problems']}"
                print(f"round {rnd}: {name}: {float(out['events_per_second']):,.0f} "
                      f"events/s ({verdict}); {cpu_summary(out['cpu_core_ms_per_1k'])}",
                      flush=True)  # fmt: skip
    finally:
        drop(settings, keyspaces, topics)
        shutil.rmtree(ledger, ignore_errors=True)
    exact = all(r["exact"] for rs in runs.values() for r in rs)
    rates = {n: [float(r["events_per_second"]) for r in rs] for n, rs in runs.items()}
    medians = harness.medians(rates)
    plain = medians["plain"]
    print(f"median: plain {plain:,.0f} events/s; "
          + "; ".join(f"{name} {medians[name]:,.0f} events/s: {name}/plain = "
                      f"{medians[name] / plain:.2f}" for name in medians if name != "plain")
          + ("" if exact else "  (NOT EXACT: the numbers do not count)"))  # fmt: skip
    issue = "issue: speed layer at least twice as fast as a plain Python consumer"
    labels = {
        "views, warm": "speed layer, views query, running (warm JVM)",
        "both, warm": "speed layer, both queries, running (warm JVM)",
        "views": "speed layer, views query, one-shot (cold JVM)",
        "both": "speed layer, both queries, one-shot (cold JVM, as make demo runs it)",
    }
    goals = {"views": 2.0, "both": 1.5}
    figures = [
        results.vs_peer(label, medians[name], "events/s", "plain consumer", plain,
                        results.Goal(">=", goals[name.split(",")[0]], issue))
        for name, label in labels.items()
    ] + [results.baseline("plain consumer", plain, "events/s")]  # fmt: skip
    figures += cpu_figures(runs, plain, goals, labels, issue)
    if baseline:
        name = baseline[0]
        figures += [
            results.vs_peer(f"speed layer, {query}", medians[query], "events/s",
                            f"{query}, {name}", medians[f"{query}, {name}"])
            for query in ("views", "both")
        ] + [
            results.vs_peer(f"speed layer, {query}, {name}", medians[f"{query}, {name}"],
                            "events/s", "plain consumer", plain)
            for query in ("views", "both")
        ]  # fmt: skip
    verdict = "exact" if exact else "NOT EXACT"
    notes = (f"{len(result.messages)} messages ({summary.get('faults', summary)}); "
             f"every run checked against the ledger: {verdict}")  # fmt: skip
    results.write(args, "speed_vs_plain", figures,
                  runs=[{"contender": n, "round": i + 1, **r}
                        for n, rs in runs.items() for i, r in enumerate(rs)],
                  notes=notes)  # fmt: skip


if __name__ == "__main__":
    main()
