"""Speed views on a 50k-message backlog, this checkout against another git revision.

    python bench/speed_backlog.py [--count 50000] [--vs HEAD~5] [--rounds 2]

Produces one topic of simulated receipts with realistic faults (resends, malformed,
late), then runs `pos-speed run --available-now --jobs views` over it in one
micro-batch, for this checkout and (with --vs) for another revision checked out in
a temporary git worktree, alternating, each into its own keyspace. Reports the
views query's own processed events/s (from its progress) and the ratio. Use it to
price a change of the micro-batch (e.g. the hardening against hostile input).
Writes docs/bench/speed_backlog.json (bench/results.py; --no-json: don't). Needs `make up`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import results as bench_results  # bench/, beside this script
from faulted_topic import produce_faulted_topic
from speed_latency import QUERY_OF_JOB

from pos_lambda.settings import PROJECT_ROOT, Settings, load_settings


def _env(settings: Settings, code: Path, keyspace: str, data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(code),
        "POS_JARS_DIR": str(settings.jars_dir),
        "POS_STATE_DIR": str(settings.state_dir),
        "POS_TOPIC_TRANSACTIONS": settings.topics.transactions,
        "POS_CASSANDRA_KEYSPACE": keyspace,
        "POS_DATA_DIR": str(data),
        "POS_SPEED_MAX_OFFSETS_PER_TRIGGER": "1000000",  # the whole backlog, one batch
    }


def run_views(settings: Settings, code: Path, tag: str) -> float:
    """Events/s of the views query over the whole topic, for the code under `code`."""
    keyspace = f"bench_{tag}_{uuid.uuid4().hex[:6]}"
    data = Path(tempfile.mkdtemp(prefix=f"bench-backlog-{tag}-"))
    env = _env(settings, code, keyspace, data)
    py = sys.executable
    subprocess.run([py, "-m", "pos_lambda.runtime.cli", "schema"], env=env, cwd=code, check=True,
                   capture_output=True)  # fmt: skip
    done = subprocess.run(
        [py, "-m", "pos_lambda.speed_layer.cli", "run", "--available-now", "--jobs", "views"],
        env=env, cwd=code, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tag}: pos-speed failed:\n{done.stderr[-3000:]}")
    status = json.loads((data / "speed_status.json").read_text())[QUERY_OF_JOB["views"]]
    return float(status["processed_rows_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=50_000, help="unique receipts")
    parser.add_argument("--vs", help="git revision to compare with (e.g. a commit)")
    parser.add_argument("--rounds", type=int, default=2)
    bench_results.add_json_argument(parser, "speed_backlog")
    args = parser.parse_args()
    settings, result = produce_faulted_topic(load_settings(), "bench.backlog", args.count)
    print(f"{len(result.messages)} messages in {settings.topics.transactions}", flush=True)

    codes = {"this": PROJECT_ROOT}
    worktree = None
    if args.vs:
        worktree = Path(tempfile.mkdtemp(prefix="bench-vs-")) / "code"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.vs],
                       cwd=PROJECT_ROOT, check=True, capture_output=True)  # fmt: skip
        codes[args.vs] = worktree
    rates: dict[str, list[float]] = {tag: [] for tag in codes}
    try:
        for rnd in range(args.rounds):
            for tag, code in codes.items():
                rate = run_views(settings, code, "this" if code == PROJECT_ROOT else "vs")
                rates[tag].append(rate)
                print(f"round {rnd + 1}: {tag}: {rate:,.0f} events/s", flush=True)
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)],
                           cwd=PROJECT_ROOT, check=False)  # fmt: skip
    medians = {tag: statistics.median(r) for tag, r in rates.items()}
    line = ", ".join(f"{tag} {m:,.0f} events/s" for tag, m in medians.items())
    if args.vs:
        line += f": this/{args.vs} = {medians['this'] / medians[args.vs]:.2f}"
    print(f"median: {line}")
    this = "this checkout events/s"
    figures = [bench_results.baseline(this, medians["this"], "events/s")]
    if args.vs:
        other = f"{args.vs} events/s"
        figures = [
            bench_results.vs_peer(this, medians["this"], "events/s", other, medians[args.vs]),
            bench_results.baseline(other, medians[args.vs], "events/s"),
        ]
    bench_results.write(
        args,
        "speed_backlog",
        figures,
        runs=[
            {"code": tag, "round": i + 1, "events_per_s": r}
            for tag, rs in rates.items()
            for i, r in enumerate(rs)
        ],
        notes=f"`pos-speed run --available-now --jobs views`, one micro-batch of "
        f"{len(result.messages):,} messages ({args.count:,} receipts with faults); "
        f"the views query's processed rows/s, median of {args.rounds} alternating rounds",
    )


if __name__ == "__main__":
    main()
