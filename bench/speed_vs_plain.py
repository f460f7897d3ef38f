"""The speed layer vs the plain Python consumer, same topic, same run.

    python bench/speed_vs_plain.py [--count 50000] [--rounds 2] [--baseline REV]

Produces one topic of simulated receipts with faults (resends, malformed, late;
the producer's ledger beside it), then alternates, `--rounds` times (in this order, then
in reverse, so that no contender always runs right after the same one):
  - the plain consumer (bench/plain_consumer.py, the alternative a user might write),
  - `pos-speed run --available-now --jobs views` (the views query alone, one
    micro-batch),
  - `pos-speed run --available-now` (both queries, archiver and views, as `make
    demo` runs them: one micro-batch each, side by side in one driver),
and with `--baseline REV` both speed contenders again with the code at REV (a git
worktree, this checkout's jars and services), each into a fresh keyspace of its own,
and checks each keyspace against the ledger: a run counts only when its views are
exact. Reports events/s of each and the ratios to the plain consumer: the plain
consumer from its first message to its last write; the views query's processed rows/s
of its micro-batch (from its progress); both queries: messages / the span from the
first micro-batch's start to the last one's end. JVM start-up is excluded on every
side. Needs `make up`; drops its keyspaces at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import results  # bench/, beside this script
from faulted_topic import produce_faulted_topic
from plain_consumer import check_ledger

from infra import cassandra_client, schema_apply
from infra.settings import PROJECT_ROOT, Settings, load_settings
from producer import ledger as ledger_files


def _env(settings: Settings, keyspace: str, data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "POS_TOPIC_TRANSACTIONS": settings.topic_transactions,
        "POS_CASSANDRA_KEYSPACE": keyspace,
        "POS_DATA_DIR": str(data),
        "POS_SPEED_MAX_OFFSETS_PER_TRIGGER": "1000000",  # the whole backlog, one batch
    }


def run_plain(settings: Settings, keyspace: str, ledger: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "bench/plain_consumer.py", "--topic", settings.topic_transactions,
         "--keyspace", keyspace, "--ledger", str(ledger)],
        env=_env(settings, keyspace, Path(tempfile.gettempdir())), cwd=PROJECT_ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"plain consumer failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _span_s(batches: list[dict[str, Any]]) -> float:
    """Seconds from the first micro-batch's start to the last one's end."""
    ends = [datetime.fromisoformat(b["finished_at"]) for b in batches]
    starts = [end - timedelta(milliseconds=b["duration_ms"]) for end, b in zip(ends, batches)]  # noqa: B905 - same length
    return (max(ends) - min(starts)).total_seconds()


def run_speed(
    settings: Settings, keyspace: str, ledger: Path, jobs: str, tree: Path | None = None
) -> dict[str, object]:
    """`pos-speed run --available-now` with `jobs` ("views" or "archiver,views"), of
    this checkout or of the code in `tree` (another revision's worktree)."""
    data = Path(tempfile.mkdtemp(prefix="bench-svp-"))
    env = _env(settings, keyspace, data)
    if tree:
        env = results.code_env(tree, env)
    try:
        schema_apply.apply_cql(settings, keyspace)
        # In the tree's directory: `python -m` puts the working directory first on
        # sys.path, ahead of PYTHONPATH (from here it would run this checkout's code).
        done = subprocess.run(
            [sys.executable, "-m", "speed_layer.cli", "run", "--available-now", "--jobs", jobs],
            env=env, cwd=tree or PROJECT_ROOT, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"pos-speed failed:\n{done.stderr[-3000:]}")
        status = json.loads((data / "speed_status.json").read_text())
    finally:
        shutil.rmtree(data, ignore_errors=True)
    batches = [status[f"pos-speed-{job}"] for job in jobs.split(",")]
    views = status["pos-speed-views"]
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
        "batches": batches,
        "exact": not problems,
        "problems": problems,
    }


def drop_keyspaces(settings: Settings, keyspaces: list[str]) -> None:
    cluster = cassandra_client.cluster(settings, writes=True)
    session = cluster.connect()
    try:
        for ks in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=50_000, help="unique receipts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run both speed contenders with the project's code at this git revision "
        "(e.g. HEAD~1): what a change buys, side by side",
    )
    results.add_json_argument(parser, "speed_vs_plain")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        baseline = stack.enter_context(results.code_at(args.baseline)) if args.baseline else None
        compare(args, baseline)


def compare(args: argparse.Namespace, baseline: tuple[str, Path] | None) -> None:
    """Alternating contenders on one faulted topic; the report (see the module doc)."""
    settings, result = produce_faulted_topic(load_settings(), "bench.svp", args.count)
    ledger = Path(tempfile.mkdtemp(prefix="bench-svp-ledger-"))
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    summary = result.summary
    print(f"{len(result.messages)} messages in {settings.topic_transactions} "
          f"({summary.get('faults', summary)})", flush=True)  # fmt: skip

    contenders: dict[str, Callable[[Settings, str, Path], dict[str, object]]] = {
        "plain": run_plain,
        "views": partial(run_speed, jobs="views"),
        "both": partial(run_speed, jobs="archiver,views"),
    }
    if baseline:
        name, tree = baseline
        contenders[f"views, {name}"] = partial(run_speed, jobs="views", tree=tree)
        contenders[f"both, {name}"] = partial(run_speed, jobs="archiver,views", tree=tree)
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in contenders}
    keyspaces: list[str] = []
    try:
        for rnd in range(args.rounds):
            # Every other round in reverse order: no contender always runs right after
            # the same one (Cassandra still flushing the last run's writes, say).
            order = list(contenders.items())
            for name, run in order[::-1] if rnd % 2 else order:
                ks = f"bench_svp_{name.split(',')[0]}_{uuid.uuid4().hex[:6]}"
                keyspaces.append(ks)
                out = run(settings, ks, ledger)
                runs[name].append(out)
                verdict = "exact" if out["exact"] else f"NOT EXACT {out['problems']}"
                print(f"round {rnd + 1}: {name}: {float(out['events_per_second']):,.0f} "  # type: ignore[arg-type]
                      f"events/s ({verdict})", flush=True)  # fmt: skip
    finally:
        drop_keyspaces(settings, keyspaces)
        shutil.rmtree(ledger, ignore_errors=True)
    exact = all(r["exact"] for rs in runs.values() for r in rs)
    rates = {n: [float(r["events_per_second"]) for r in rs] for n, rs in runs.items()}  # type: ignore[arg-type]
    medians = {n: statistics.median(r) for n, r in rates.items()}
    plain = medians["plain"]
    print(f"median: plain {plain:,.0f} events/s; views query {medians['views']:,.0f} "
          f"events/s: views/plain = {medians['views'] / plain:.2f}; both queries "
          f"{medians['both']:,.0f} events/s: both/plain = {medians['both'] / plain:.2f}"
          + ("" if exact else "  (NOT EXACT: the numbers do not count)"))  # fmt: skip
    issue = "issue: speed layer at least twice as fast as a plain Python consumer"
    figures = [
        results.vs_peer("speed layer, views query", medians["views"], "events/s",
                        "plain consumer", plain, results.Goal(">=", 2.0, issue)),
        results.vs_peer("speed layer, both queries (as make demo runs it)", medians["both"],
                        "events/s", "plain consumer", plain, results.Goal(">=", 1.5, issue)),
        results.baseline("plain consumer", plain, "events/s"),
    ]  # fmt: skip
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
