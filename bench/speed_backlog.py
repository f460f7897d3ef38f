"""Speed views on a 50k-message backlog, this checkout against another git revision.

    python -m bench.speed_backlog [--count 50000] [--vs HEAD~5] [--rounds 2]

Produces one topic of simulated receipts with realistic faults (resends, malformed,
late), then runs `pos-speed run --available-now --jobs views` over it in one
micro-batch, for this checkout and (with --vs) for another revision checked out in
a temporary git worktree, alternating, each into its own keyspace. Reports the
views query's own processed events/s (from its progress) and the ratio. Use it to
price a change of the micro-batch (e.g. the hardening against hostile input).
Writes docs/bench/speed_backlog.json (bench/results.py; --no-json: don't). Needs `make up`.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from pathlib import Path

from bench import harness, results, revisions
from bench.faulted_topic import produce_faulted_topic
from bench.harness import QUERY_OF_JOB
from pos_lambda.settings import Settings, load_settings


def run_views(settings: Settings, tree: Path | None, tag: str) -> float:
    """Events/s of the views query over the whole topic, for the code in `tree` (None:
    this checkout's)."""
    keyspace = f"bench_{tag}_{uuid.uuid4().hex[:6]}"
    data = Path(tempfile.mkdtemp(prefix=f"bench-backlog-{tag}-"))
    env = harness.pipeline_env(keyspace, data, settings.topics.transactions, tree)
    harness.run_pipeline("pos-provision", "schema", env=env, tree=tree)  # the tree's own tables
    try:
        status = harness.speed_once(settings.topics.transactions, keyspace, data, "views", tree)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return float(status[QUERY_OF_JOB["views"]]["processed_rows_per_second"])


def main() -> None:
    parser = harness.parser(__doc__, "speed_backlog")
    parser.add_argument("--count", type=int, default=50_000, help="unique receipts")
    parser.add_argument("--vs", help="git revision to compare with (e.g. a commit)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    settings, result = produce_faulted_topic(load_settings(), "bench.backlog", args.count)
    print(f"{len(result.messages)} messages in {settings.topics.transactions}", flush=True)

    codes: dict[str, Path | None] = {"this": None}
    with contextlib.ExitStack() as stack:
        if args.vs:
            codes[args.vs] = stack.enter_context(revisions.code_at(args.vs))[1]
        rates: dict[str, list[float]] = {tag: [] for tag in codes}
        for rnd, (tag, tree) in harness.alternate(args.rounds, codes.items()):
            rate = run_views(settings, tree, "this" if tree is None else "vs")
            rates[tag].append(rate)
            print(f"round {rnd}: {tag}: {rate:,.0f} events/s", flush=True)
    medians = harness.medians(rates)
    line = ", ".join(f"{tag} {m:,.0f} events/s" for tag, m in medians.items())
    if args.vs:
        line += f": this/{args.vs} = {medians['this'] / medians[args.vs]:.2f}"
    print(f"median: {line}")
    this = "this checkout events/s"
    figures = [results.baseline(this, medians["this"], "events/s")]
    if args.vs:
        other = f"{args.vs} events/s"
        figures = [
            results.vs_peer(this, medians["this"], "events/s", other, medians[args.vs]),
            results.baseline(other, medians[args.vs], "events/s"),
        ]
    results.write(
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
