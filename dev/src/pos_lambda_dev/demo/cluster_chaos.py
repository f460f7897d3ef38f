"""The chaos run on a replicated cluster (`make chaos-cluster`): one node of a kind
away at a time while a stream flows and every layer runs, then an audit at ALL.

On three KRaft brokers and three Cassandra nodes (`pos-infra cluster up`, 127.0.0.1-3,
replication factor 3, min ISR 2), the speed layer (`pos-speed run`), the alerts and
receipts processors run while a seeded stream (resends, late, out-of-order and malformed
messages) is produced at a steady rate. The faults (`cluster_faults`, in this order):
kill -9 of the broker leading the input partitions, of the alerts processor's
transaction coordinator, of the active KRaft controller; kill -9 of a Cassandra node
while the speed layer writes (back with its hints replayed), and while a batch run
commits its pointer; SIGSTOP of a Cassandra node for 30 s. Each node stays away
`--down-seconds`, so the figures show whether the pipeline keeps going without it:

- the longest gap in committed output while the node was away, for the speed views
  (the views query's checkpointed input offsets), `pos.receipts` and `pos.alerts` (the
  processors' committed input offsets: a transaction's offsets commit with its output);
- throughput while it was away against the `--settle-seconds` before it;
- the batch commit's time with a node down.

Then the stream finishes, every layer catches up, `pos-batch run` recomputes, and
`pos-audit` reads every view at ALL (POS_CASSANDRA_AUDIT_CONSISTENCY): 0 lost, 0
duplicated, 0 wrong. Figures go to docs/chaos-cluster.md and .json (`--out`).

The Spark drivers run in local mode here, not on the standalone cluster (docs/cluster.md
says why).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pos_lambda.settings import PROJECT_ROOT, Settings, load_settings
from pos_lambda_dev.demo import cluster_faults, steps, story
from pos_lambda_dev.demo.chaos_context import Counting
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    run_logged,
    start_logged,
    stop_gracefully,
)
from pos_lambda_dev.runtime import cluster, jars

STATE = PROJECT_ROOT / ".state" / "chaos-cluster"
NAMESPACE = {
    "cassandra_keyspace": "pos_chaos_cluster",
    "topic_transactions": "chaosc.transactions",
    "topic_dead_letters": "chaosc.dead_letters",
    "topic_alerts": "chaosc.alerts",
    "topic_receipts": "chaosc.receipts",
    "alerts_group_id": "chaosc-alerts",
    "alerts_sink_group_id": "chaosc-alerts-sink",
    "alerts_instance_id": "chaosc-1",
    "receipts_group_id": "chaosc-receipts",
    "receipts_instance_id": "chaosc-1",
    "data_dir": STATE / "data",
}
STREAM_FAULT_RATES = {
    "resend_rate": 0.01,
    "burst_rate": 0.02,
    "late_rate": 0.02,
    "late_max_delay_s": 6 * 3600.0,
    "out_of_order_rate": 0.01,
    "clock_skew_max_s": 30.0,
    "malformed_rate": 0.005,
    "lost_at_source_rate": 0.002,  # numbered by the till, never sent: gaps
}
SERIES = ("views", "receipts", "alerts")


# --- the figures (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float
    views: int | None
    receipts: int | None
    alerts: int | None


def value_at(samples: list[Sample], series: str, at: float) -> int | None:
    """The series' last known value at or before `at`."""
    best = None
    for s in samples:
        if s.at > at:
            break
        v = getattr(s, series)
        if v is not None:
            best = v
    return best


def longest_gap(samples: list[Sample], series: str, start: float, end: float) -> float:
    """The longest time between two commits of `series` (its value rising) among the
    intervals that overlap [start, end]; one still open at the last sample counts to it.

    Gaps start at the series' first known value, not at the first sample: before it the
    views had not committed yet (no checkpoint), which is the speed layer's start-up, not
    an outage. Counted from the first sample, a first fault struck before the second
    views commit was charged the whole start-up (a CI run reported a 137 s views gap
    for a broker kill struck 8 s after the first views commit)."""
    rises = []
    first_known = None
    last = None
    for s in samples:
        v = getattr(s, series)
        if v is None:
            continue
        if last is None:
            first_known = s.at
        elif v > last:
            rises.append(s.at)
        last = v
    if not samples:
        return 0.0
    edges = [samples[0].at if first_known is None else first_known, *rises, samples[-1].at]
    gaps = [b - a for a, b in itertools.pairwise(edges) if b >= start and a <= end]
    return max(gaps, default=0.0)


def rate(samples: list[Sample], series: str, start: float, end: float) -> float | None:
    """Committed input offsets per second over [start, end]."""
    a, b = value_at(samples, series, start), value_at(samples, series, end)
    if a is None or b is None or end <= start:
        return None
    return (b - a) / (end - start)


@dataclass(frozen=True)
class FaultFigures:
    name: str
    label: str
    node: str
    detail: str
    away_s: float
    gaps_s: dict[str, float]
    rate_before: dict[str, float | None]
    rate_during: dict[str, float | None]
    batch_commit_s: float | None = None
    views_commits_away: int | None = None


def figures_of(
    fault: cluster_faults.ClusterFault,
    struck: cluster_faults.Struck,
    samples: list[Sample],
    settle_s: float,
    batch_commit_s: float | None = None,
) -> FaultFigures:
    t0, t1 = struck.struck_at, struck.back_at
    return FaultFigures(
        fault.name,
        fault.label,
        struck.node,
        struck.detail,
        t1 - t0,
        {s: round(longest_gap(samples, s, t0, t1), 1) for s in SERIES},
        {s: _round(rate(samples, s, t0 - settle_s, t0)) for s in SERIES},
        {s: _round(rate(samples, s, t0, t1)) for s in SERIES},
        batch_commit_s,
        struck.views_commits_away,
    )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def _ratio(during: float | None, before: float | None) -> str:
    if during is None or not before:
        return "–"
    return f"{during / before:.2f}"


def render(doc: dict[str, Any]) -> str:
    """docs/chaos-cluster.md from the run's JSON."""
    lines = [
        "# Chaos on a replicated cluster: figures of the last run",
        "",
        "Generated by `make chaos-cluster` (dev/src/pos_lambda_dev/demo/cluster_chaos.py) "
        "from `chaos-cluster.json`; how to read it: [cluster.md](cluster.md).",
        "",
        f"- Run: {doc['when']}, commit {doc['commit']}, {doc['seconds']:.0f} s in all.",
        f"- Stream: {doc['messages']:,} messages ({doc['receipts']:,} receipts) at "
        f"{doc['rate']:.0f}/s, seed {doc['seed']}; each node away {doc['down_s']:.0f} s.",
        f"- Cluster: 3 KRaft brokers and 3 Cassandra nodes on 127.0.0.1-3; largest resident "
        f"size seen {doc['memory_mib']['total']:,} MiB in all (Kafka "
        f"{doc['memory_mib']['kafka']:,}, Cassandra {doc['memory_mib']['cassandra']:,}).",
        f"- Audit at ALL after every node was back: **{doc['audit']}**.",
        "",
        "Longest gap in committed output while the node was away (s), and throughput "
        "then against before it (committed input offsets per second, ratio):",
        "",
        "| fault | node | away (s) | views gap | receipts gap | alerts gap | views rate | "
        "receipts rate | alerts rate | batch commit (s) | what happened |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in doc["faults"]:
        g, b, d = f["gaps_s"], f["rate_before"], f["rate_during"]
        rates = [
            f"{d[s] if d[s] is not None else '–'} / {b[s] if b[s] is not None else '–'} "
            f"({_ratio(d[s], b[s])})"
            for s in SERIES
        ]
        commit = "–" if f["batch_commit_s"] is None else f"{f['batch_commit_s']:.1f}"
        lines.append(
            f"| {f['label']} | {f['node']} | {f['away_s']:.0f} | {g['views']:.0f} | "
            f"{g['receipts']:.0f} | {g['alerts']:.0f} | {' | '.join(rates)} | {commit} | "
            f"{f['detail']} |"
        )
    lines += ["", *[f"- {n}" for n in doc.get("notes", [])]]
    return "\n".join(lines).rstrip() + "\n"


# --- the run (shell) ----------------------------------------------------------------------


@dataclass
class ClusterRun:
    settings: Settings  # the run's namespace, on the cluster
    base: Settings  # the cluster's own (state dir, jars)
    layout: cluster.Layout
    args: argparse.Namespace
    say: Progress
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    restarts: int = 0
    frozen: set[int] = field(default_factory=set)
    batch_commit_s: float | None = None
    notes: list[str] = field(default_factory=list)
    memory_mib: dict[str, int] = field(default_factory=lambda: {"kafka": 0, "cassandra": 0})
    # The data's hours: the batch runs (the fault's and the final one) cover them.
    interval: tuple[datetime, datetime] = (datetime.min, datetime.min)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ) | self.settings.environment()

    def start(self, name: str, argv: list[str]) -> None:
        self.procs[name] = start_logged(argv, self.env, self.logs / f"{name}.log")

    def start_all(self) -> None:
        self.start("speed", [str(VENV_BIN / "pos-speed"), "run"])
        self.start("alerts", [str(VENV_BIN / "pos-alerts"), "run"])
        self.start("receipts", [str(VENV_BIN / "pos-receipts"), "run"])

    def watch(self) -> None:
        """Start again whatever exited, as a process manager would."""
        with self.lock:
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None:
                    self.say(f"watch: {name} exited {proc.returncode}; starting it again")
                    self.restarts += 1
                    self.start(name, [str(a) for a in proc.args])  # type: ignore[union-attr]

    def hold(self, seconds: float) -> None:
        """Let `seconds` pass while the stream flows, keeping the processes up."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.watch()
            self.stop.wait(min(1.0, max(0.0, end - time.monotonic())))

    def committed_once(self) -> bool:
        self.watch()
        return self.views_commits() >= 0

    def views_commits(self) -> int:
        commits = self.settings.checkpoint_dir / "views" / "commits"
        with contextlib.suppress(FileNotFoundError):
            return max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)
        return -1

    def start_batch(self, gate: Path, log: Path) -> subprocess.Popen[bytes]:
        env = self.env | {"POS_BATCH_PAUSE_BEFORE_COMMIT": str(gate)}
        start, end = self.interval
        argv = [str(VENV_BIN / "pos-batch"), "run", "--start", start.isoformat(), "--end",
                end.isoformat()]  # fmt: skip
        return start_logged(argv, env, log)

    def sample(self) -> Sample:
        s = self.settings

        def total(read: Any) -> int | None:
            with contextlib.suppress(Exception):  # a broker or coordinator away: unknown
                got = read()
                return None if got is None else sum(got.values())
            return None

        views = total(
            lambda: steps.checkpoint_offsets(s.checkpoint_dir / "views", s.topics.transactions)
        )
        receipts = total(lambda: _committed(s, s.receipts.group_id))
        alerts = total(lambda: _committed(s, s.alerts.group_id))
        return Sample(time.monotonic(), views, receipts, alerts)

    def sampler(self) -> threading.Thread:
        def run() -> None:
            while not self.stop.is_set():
                self.samples.append(self.sample())
                self._note_memory()
                self.stop.wait(1.0)

        thread = threading.Thread(target=run, name="sampler", daemon=True)
        thread.start()
        return thread

    def _note_memory(self) -> None:
        for kind, proc_of in (
            ("kafka", cluster.kafka_process),
            ("cassandra", cluster.cassandra_process),
        ):
            total = 0
            for n in range(1, cluster.NODES + 1):
                pid = proc_of(self.base, n).pid()
                if pid is not None:
                    total += _rss_mib(pid)
            self.memory_mib[kind] = max(self.memory_mib[kind], total)


def _committed(settings: Settings, group: str) -> dict[int, int]:
    """The group's committed input offsets; librdkafka's lines about the node that is
    away go to the run's log, not the terminal."""
    from confluent_kafka import TopicPartition

    from pos_lambda.adapters.kafka_clients import ConfluentClients

    consumer = ConfluentClients.from_settings(settings).offsets_reader(
        group, logger=logging.getLogger("pos.chaos.sampler")
    )
    try:
        topic = settings.topics.transactions
        md = consumer.list_topics(topic, timeout=10)
        tps = [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]
        return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10)}
    finally:
        consumer.close()


def _rss_mib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cluster-chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--count", type=int, default=30_000, help="receipts in the stream")
    p.add_argument("--rate", type=float, default=40.0, help="messages per second while faults run")
    p.add_argument("--seed", type=int, default=64)
    p.add_argument("--stores", type=int, default=20)
    p.add_argument("--down-seconds", type=float, default=30.0, help="how long each node stays away")
    p.add_argument(
        "--settle-seconds",
        type=float,
        default=20.0,
        help="the stream flows this long before each fault (its baseline)",
    )
    p.add_argument("--step-timeout", type=float, default=600.0)
    p.add_argument("--logs", type=Path, default=STATE / "logs")
    p.add_argument("--ledger", type=Path, default=STATE / "ledger")
    p.add_argument("--out", type=Path, default=PROJECT_ROOT / "docs")
    return p


def _prepare(run: ClusterRun) -> tuple[list[Any], dict[str, Any], tuple[datetime, datetime]]:
    from pos_lambda.producer import ledger
    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate

    s, args = run.settings, run.args
    jars.fetch(run.base)
    run.say("cluster: starting (or checking) 3 Kafka and 3 Cassandra nodes ...")
    took = cluster.up(run.base, run.layout)
    run.say(f"cluster: up ({took:.0f} s)")
    topics = {
        t: s.topics.partitions
        for t in (s.topics.transactions, s.topics.dead_letters, s.topics.alerts, s.topics.receipts)
    }
    steps.reset_topics(s, topics, [s.alerts.group_id, s.alerts.sink_group_id, s.receipts.group_id])
    steps.reset_keyspace(s)
    steps.reset_dir(s.data_dir)
    steps.reset_dir(args.ledger)
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    result = simulate(
        SimulationConfig(
            count=args.count,
            seed=args.seed,
            start=start,
            stores=args.stores,
            faults=FaultConfig(**STREAM_FAULT_RATES),
        )
    )
    ledger.write(args.ledger, result.receipts, result.faults, result.summary)
    happened = [datetime.fromisoformat(r["happened_at"]) for r in result.receipts]
    first = min(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last = max(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return result.messages, result.summary, (first, last + timedelta(hours=1))


def _produce(run: ClusterRun, stream: Counting) -> threading.Thread:
    from pos_lambda.adapters.kafka_clients import ConfluentClients
    from pos_lambda.producer.kafka_sink import produce

    s = run.settings
    client = ConfluentClients.from_settings(s).producer(
        logger=logging.getLogger("pos.chaos.producer")
    )
    errors: list[BaseException] = []

    def body() -> None:
        try:
            produce(
                stream,
                s.bootstrap_servers,
                s.topics.transactions,
                rate=0.0,
                quiet=True,
                flush_timeout_s=600,
                producer=client,
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body, name="producer", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def _catch_up(run: ClusterRun) -> None:
    s = run.settings

    def done() -> bool:
        run.watch()
        return (
            steps.speed_caught_up(s)
            and steps.group_caught_up(s, s.alerts.group_id, s.topics.transactions)
            and steps.group_caught_up(s, s.receipts.group_id, s.topics.transactions)
        )

    await_or_fail(done, run.args.step_timeout, "every layer to catch up")
    for name in list(run.procs):
        proc = run.procs.pop(name)
        run.say(f"catch-up: {name} stopped (exit {stop_gracefully(proc)})")
    code = run_logged(
        [str(VENV_BIN / "pos-alerts"), "sink", "--until-caught-up"],
        run.env,
        run.logs / "alerts-sink.log",
        run.args.step_timeout,
        "the alerts sink",
    )
    if code != 0:
        raise StepFailed(f"the alerts sink exited {code}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run; the figures' JSON (also written to args.out)."""
    say = Progress()
    args.logs.mkdir(parents=True, exist_ok=True)
    steps.log_to_file(args.logs / "chaos-cluster.log")
    base = load_settings()
    layout = cluster.Layout()
    settings = cluster.client_settings(base, layout).with_overrides(**NAMESPACE)
    crun = ClusterRun(settings, base, layout, args, say, args.logs)
    steps.interrupt_on_sigterm()
    struck: list[FaultFigures] = []
    try:
        messages, summary, crun.interval = _prepare(crun)
        first, last = crun.interval
        crun.start_all()
        sampler = crun.sampler()
        # The stream waits after its first messages until the speed layer has committed
        # them: its start-up (a few minutes under this load) must not eat the stream.
        first_batch = min(200, len(messages))
        stream = Counting(messages, args.rate, holds=(first_batch,))
        producer = _produce(crun, stream)
        say(
            f"stream: {len(messages):,} messages at {args.rate:.0f}/s; awaiting the first "
            "views commit"
        )
        await_or_fail(crun.committed_once, args.step_timeout, "the speed layer's first commit")
        stream.release(first_batch)
        for fault in cluster_faults.FAULTS:
            crun.hold(args.settle_seconds)
            if stream.sent >= len(messages):  # a fault without traffic measures nothing
                crun.notes.append(f"the stream had ended before {fault.name}: raise --count")
            made = fault.strike(crun)
            commit_s = crun.batch_commit_s if fault.name.endswith("batch_commit") else None
            got = figures_of(fault, made, list(crun.samples), args.settle_seconds, commit_s)
            struck.append(got)
            say(
                f"figures: longest gaps {got.gaps_s} s; throughput during/before "
                f"{got.rate_during} / {got.rate_before}"
            )
        stream.rate = 0.0  # the faults are done: the rest of the stream at once
        say(f"faults done; the rest of the stream ({len(messages) - stream.sent:,}) at once")
        producer.join(timeout=args.step_timeout)
        if producer.errors:  # type: ignore[attr-defined]
            raise StepFailed(f"the producer failed: {producer.errors[0]}")  # type: ignore[attr-defined]
        _catch_up(crun)
        crun.stop.set()
        sampler.join(timeout=60)
        for command in ("run",):
            code = run_logged(
                [
                    str(VENV_BIN / "pos-batch"),
                    command,
                    "--start",
                    first.isoformat(),
                    "--end",
                    last.isoformat(),
                ],
                crun.env,
                args.logs / "batch.log",
                args.step_timeout,
                "pos-batch run",
            )
            if code != 0:
                raise StepFailed(f"pos-batch {command} exited {code}")
        report = args.logs / "audit.json"
        steps.audit(args.ledger, report, crun.env, args.logs / "audit.log", args.step_timeout)
        audited = story.parse_audit(json.loads(report.read_text()), str(report))
    finally:
        crun.stop.set()
        for pid in list(crun.frozen):
            with contextlib.suppress(OSError):
                os.kill(pid, 18)  # SIGCONT: never leave a node frozen
        for proc in crun.procs.values():
            stop_gracefully(proc, timeout=60)
        with contextlib.suppress(Exception):
            cluster.up(base, layout)  # every node back for whoever runs next
    exact = [v for v in audited.views if v.exact]
    verdict = (
        f"{'clean' if audited.clean else 'DISCREPANCIES'}: {len(exact)} exact views, "
        f"{sum(v.lost for v in exact)} lost, {sum(v.duplicated for v in exact)} duplicated, "
        f"{sum(v.wrong for v in exact)} wrong"
    )
    doc = {
        "when": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "seconds": say.elapsed,
        "messages": summary["messages"],
        "receipts": summary.get("unique_receipts", args.count),
        "rate": args.rate,
        "seed": args.seed,
        "down_s": args.down_seconds,
        "memory_mib": crun.memory_mib | {"total": sum(crun.memory_mib.values())},
        "restarts": crun.restarts,
        "clean": audited.clean,
        "audit": verdict,
        "faults": [f.__dict__ for f in struck],
        "notes": crun.notes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chaos-cluster.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "chaos-cluster.md").write_text(render(doc))
    say(f"figures written to {args.out / 'chaos-cluster.md'}; audit: {verdict}")
    return doc
