"""`make upgrade-test`: the previous release under a live faulty stream, upgraded layer
by layer to this checkout while the stream flows, then the audit (issue 73).

    make upgrade-test                          # 6,000 receipts at 20/s (~5 min)
    pytest -m e2e tests/e2e/test_upgrade.py -s --count 6000

The previous release is the one `releases.json` names before this one, installed by
`dev/upgrade/install-previous.sh` (a git worktree of its commit with its own virtualenv,
`.state/upgrade/previous`). Its whole pipeline runs in its own namespace (keyspace
`pos_upgrade`, topics `upgrade.*`, data dir `.state/upgrade/data`) on the local Kafka and
Cassandra: its schema, two instances each of `pos-receipts run` and `pos-alerts run`,
`pos-alerts sink`, `pos-speed run`, a batch run, and `pos-serve http` answering a probe
four times a second. A seeded stream with every fault knob on (resends, bursts, late,
out-of-order and malformed messages, conflicting copies) flows at a steady rate.

Mid-stream, each layer is upgraded in turn as docs/upgrading.md tells an operator:

1. the schema (`pos-provision schema` of this release);
2. the transactional processors, one instance at a time (SIGTERM, then this release's
   with the same instance id), then the alert sink;
3. the speed layer from its checkpoint (SIGTERM, this release's `pos-speed run`);
4. the batch layer: this release's `pos-batch run`, as the DAG's task runs it;
5. serving: this release's `pos-serve http` started beside the old one, the probe
   switched to it once it answers, the old one stopped (blue/green);
6. the backfill of the view this release adds (the gaps view): `pos-batch rebuild`,
   every day's views from the master dataset as a new generation, switched to once
   whole.

The stream is long enough to flow through every step at its rate (and held before its
last tenth, should the upgrade take longer: the verdict then fails, saying so); once the
upgrade is done, the rest is sent at once. Then every layer catches up, this release's
batch run covers the data's whole UTC days (the gaps view is final only for a whole
day), and this release's `pos-audit` compares every view
with the producer's ledger: 0 lost, 0 duplicated, 0 wrong. Per step, the figures give
its duration, the longest freshness gap (seconds without a commit) of the views, of
`pos.receipts` and of `pos.alerts` around it, and the seconds serving answered with an
error; they go to docs/upgrade.json and docs/upgrade.md (`--out`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from pos_lambda.settings import PROJECT_ROOT, Settings, load_settings
from pos_lambda_dev.demo import steps, story
from pos_lambda_dev.demo.chaos_context import Counting
from pos_lambda_dev.demo.cluster_chaos import Sample, longest_gap
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    run_logged,
    start_logged,
    stop_gracefully,
)

STATE = PROJECT_ROOT / ".state" / "upgrade"
PREVIOUS = STATE / "previous"
NAMESPACE: dict[str, object] = {
    "cassandra_keyspace": "pos_upgrade",
    "topic_transactions": "upgrade.transactions",
    "topic_dead_letters": "upgrade.dead_letters",
    "topic_alerts": "upgrade.alerts",
    "topic_receipts": "upgrade.receipts",
    "alerts_group_id": "upgrade-alerts",
    "alerts_sink_group_id": "upgrade-alerts-sink",
    "receipts_group_id": "upgrade-receipts",
    "data_dir": STATE / "data",
}
INSTANCES = ("a", "b")
SPEED_QUERIES = ("archiver", "views")  # their checkpoints: settings.checkpoint_dir / name
STREAM_FAULT_RATES = {
    "resend_rate": 0.03,
    "burst_rate": 0.02,
    "late_rate": 0.03,
    "late_max_delay_s": 6 * 3600.0,
    "out_of_order_rate": 0.02,
    "clock_skew_max_s": 30.0,
    "malformed_rate": 0.01,
    "lost_at_source_rate": 0.002,  # numbered by the till, never sent: gaps
}
CONFLICT_RATE = 0.01
DEFAULT_COUNT, DEFAULT_RATE, DEFAULT_SEED = 12000, 20.0, 73


@dataclass
class StepFigures:
    """One upgrade step: when it ran, and what users saw meanwhile."""

    step: str
    seconds: float
    gaps_s: dict[str, float]  # longest gap between commits, per series, around the step
    serving_errors_s: float


@dataclass
class Probe:
    """`pos-serve http` asked four times a second, as a dashboard would; which server
    (the old or the new one) is the one users reach."""

    url: str
    samples: list[tuple[float, bool]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), answers(self.url)))
            self.stop.wait(0.25)

    def error_seconds(self, start: float, end: float) -> float:
        """Seconds within [start, end] whose sample failed (each sample counts until the
        next one)."""
        total = 0.0
        for (at, ok), (nxt, _) in zip(self.samples, self.samples[1:], strict=False):
            if not ok and nxt >= start and at <= end:
                total += min(nxt, end) - max(at, start)
        return round(total, 2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class Upgrade:
    settings: Settings
    args: argparse.Namespace
    say: Progress
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    figures: list[StepFigures] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    interval: tuple[datetime, datetime] = (datetime.min, datetime.min)
    checkpoints: dict[str, dict[str, int | None]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ) | self.settings.environment()

    def log(self, name: str) -> Path:
        return Path(self.args.logs) / f"{name}.log"

    def start(self, name: str, release: Path, argv: list[str], **env: str) -> None:
        """`argv[0]` of `release` (a venv's bin/), with the namespace's settings."""
        self.procs[name] = start_logged(
            [str(release / argv[0]), *argv[1:]], self.env | env, self.log(name)
        )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise StepFailed(
                    f"{name} exited {proc.returncode} during the upgrade; log "
                    f"{self.log(name)}:\n{steps.tail(self.log(name))}"
                )

    def replace(self, name: str, argv: list[str], between: Any = lambda: None, **env: str) -> None:
        """Stop the running `name` as an operator would (SIGTERM, it commits and leaves),
        call `between()`, start this release's in its place."""
        proc = self.procs.pop(name)
        code = stop_gracefully(proc, timeout=120)
        if code != 0:
            raise StepFailed(f"{name} of the previous release exited {code} on SIGTERM")
        between()
        self.start(name, VENV_BIN, argv, **env)

    def sample(self) -> Sample:
        s = self.settings

        def total(read: Any) -> int | None:
            with contextlib.suppress(Exception):
                got = read()
                return None if got is None else sum(got.values())
            return None

        views = total(
            lambda: steps.checkpoint_offsets(s.checkpoint_dir / "views", s.topics.transactions)
        )
        topic = s.topics.transactions
        receipts = total(lambda: steps.committed(s, s.receipts.group_id, topic))
        alerts = total(lambda: steps.committed(s, s.alerts.group_id, topic))
        return Sample(time.monotonic(), views, receipts, alerts)

    def sampler(self) -> threading.Thread:
        def run() -> None:
            while not self.stop.is_set():
                self.samples.append(self.sample())
                self.stop.wait(0.5)

        thread = threading.Thread(target=run, name="sampler", daemon=True)
        thread.start()
        return thread

    def step(self, name: str, probe: Probe, action: Any) -> None:
        """Run one upgrade step; then wait until every series has committed again, so
        that its gap is measured to the end."""
        self.say(f"upgrade: {name} ...")
        t0 = time.monotonic()
        action()
        took = time.monotonic() - t0
        before = self.sample()
        await_or_fail(
            lambda: self._moved_past(before), self.args.step_timeout, f"commits after {name}"
        )
        end = time.monotonic()
        samples = list(self.samples)
        gaps = {
            series: round(longest_gap(samples, series, t0, end), 1)
            for series in ("views", "receipts", "alerts")
        }
        figures = StepFigures(name, round(took, 1), gaps, probe.error_seconds(t0, end))
        self.figures.append(figures)
        self.say(
            f"upgrade: {name} done in {took:.1f} s; longest gaps {gaps} s; serving errors "
            f"{figures.serving_errors_s} s"
        )

    def _moved_past(self, before: Sample) -> bool:
        """Every series committed since `before`, or has nothing left to commit (the
        stream held at its last tenth)."""
        self.check_alive()
        now = self.samples[-1] if self.samples else before
        end = sum(steps.end_offsets(self.settings, self.settings.topics.transactions).values())
        return all(
            (getattr(now, s) or 0) > (getattr(before, s) or 0) or getattr(now, s) == end
            for s in ("views", "receipts", "alerts")
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-upgrade-test",
        description="The previous release under a faulty stream, upgraded layer by layer "
        "to this checkout while the stream flows; then the audit.",
    )
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help="unique receipts")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="messages per second")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the stream's seed")
    parser.add_argument("--stores", type=int, default=8, help="stores in the stream")
    parser.add_argument("--step-timeout", type=float, default=600.0, help="seconds per wait")
    parser.add_argument("--logs", type=Path, default=STATE / "logs", help="log directory")
    parser.add_argument("--ledger", type=Path, default=STATE / "ledger", help="the ledger")
    parser.add_argument(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "docs" / "upgrade",
        help="write the figures to OUT.json and OUT.md ('' for none)",
    )
    return parser


def _prepare(up: Upgrade) -> list[Any]:
    from pos_lambda.producer import ledger
    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate

    s, args = up.settings, up.args
    topics = {
        t: s.topics.partitions
        for t in (s.topics.transactions, s.topics.dead_letters, s.topics.alerts, s.topics.receipts)
    }
    steps.reset_topics(s, topics, [s.alerts.group_id, s.alerts.sink_group_id, s.receipts.group_id])
    _drop_keyspace(s)
    steps.reset_dir(s.data_dir)
    steps.reset_dir(args.ledger)
    _schema(up, PREVIOUS / ".venv" / "bin")
    start = (datetime.now(UTC) - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    result = simulate(
        SimulationConfig(
            count=args.count, seed=args.seed, start=start, stores=args.stores,
            faults=FaultConfig(**STREAM_FAULT_RATES),  # type: ignore[arg-type]
        )
    )  # fmt: skip
    mixed = add_conflicts(result.messages, rate=CONFLICT_RATE, seed=args.seed)
    faults = [*result.faults, *mixed.faults]
    summary = {**summary_with(result.summary, mixed.faults), "topic": s.topics.transactions}
    ledger.write(args.ledger, result.receipts, faults, summary)
    happened = [datetime.fromisoformat(r["happened_at"]) for r in result.receipts]
    first = min(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last = max(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    up.interval = (first, last + timedelta(hours=1))
    return list(mixed.messages)


def _drop_keyspace(s: Settings) -> None:
    from pos_lambda.adapters import cassandra_client

    with cassandra_client.open_session(s, keyspace=False, writes=True) as session:
        session.execute(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}", timeout=120)


def _start_previous(up: Upgrade, serve_port: int) -> None:
    bin_ = PREVIOUS / ".venv" / "bin"
    for instance in INSTANCES:
        up.start(f"receipts-{instance}", bin_, ["pos-receipts", "run"],
                 POS_RECEIPTS_INSTANCE_ID=f"upgrade-{instance}")  # fmt: skip
        up.start(f"alerts-{instance}", bin_, ["pos-alerts", "run"],
                 POS_ALERTS_INSTANCE_ID=f"upgrade-{instance}")  # fmt: skip
    up.start("sink", bin_, ["pos-alerts", "sink"])
    up.start("speed", bin_, ["pos-speed", "run"])
    up.start("serve", bin_, ["pos-serve", "http", "--port", str(serve_port)])


def _both_queries_committed(up: Upgrade) -> bool:
    up.check_alive()
    s = up.settings
    return all(
        steps.checkpoint_offsets(s.checkpoint_dir / job, s.topics.transactions) is not None
        for job in ("archiver", "views")
    )


def _batch(up: Upgrade, release: Path, start: datetime, end: datetime, log: str) -> None:
    argv = [str(release / "pos-batch"), "run", "--start", start.isoformat(), "--end",
            end.isoformat()]  # fmt: skip
    code = run_logged(argv, up.env, up.log(log), up.args.step_timeout, f"{log}")
    if code != 0:
        raise StepFailed(f"{log} exited {code}; log {up.log(log)}:\n{steps.tail(up.log(log))}")


def _serve_blue_green(up: Upgrade, probe: Probe, port: int) -> None:
    """This release's server beside the old one; the probe (the users) switched to it
    once it answers; then the old one stopped."""
    url = probe.url.replace(f":{up.args.serve_port}/", f":{port}/")
    up.procs["serve-new"] = start_logged(
        [str(VENV_BIN / "pos-serve"), "http", "--port", str(port)], up.env, up.log("serve-new")
    )
    await_or_fail(lambda: answers(url), up.args.step_timeout, "the new pos-serve to answer")
    probe.url = url
    stop_gracefully(up.procs.pop("serve"), timeout=60)


def _catch_up(up: Upgrade) -> None:
    s = up.settings
    topic = s.topics.transactions

    def done() -> bool:
        up.check_alive()
        return (
            steps.speed_caught_up(s)
            and steps.group_caught_up(s, s.alerts.group_id, topic)
            and steps.group_caught_up(s, s.receipts.group_id, topic)
            and steps.group_caught_up(s, s.alerts.sink_group_id, s.topics.alerts)
        )

    await_or_fail(done, up.args.step_timeout, "every layer to catch up")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run; the figures' JSON (also written to args.out)."""
    say = Progress()
    args.logs.mkdir(parents=True, exist_ok=True)
    steps.log_to_file(args.logs / "upgrade.log")
    if not (PREVIOUS / ".venv" / ".installed").exists():
        raise StepFailed(
            "the previous release is not installed: run dev/upgrade/install-previous.sh"
        )
    settings = load_settings().with_overrides(**NAMESPACE)
    args.serve_port = free_port()
    up = Upgrade(settings, args, say)
    steps.interrupt_on_sigterm()
    started = time.monotonic()
    try:
        messages = _prepare(up)
        first, last = up.interval
        probe = Probe(f"http://127.0.0.1:{args.serve_port}/days/{first.date()}/top-stores")
        _start_previous(up, args.serve_port)
        sampler = up.sampler()
        # Held after its first messages until the old speed layer commits, and before its
        # last tenth until the upgrade is done: the stream flows through every step.
        warm, tail_at = min(200, len(messages)), int(len(messages) * 0.9)
        stream = Counting(messages, args.rate, holds=(warm, tail_at))
        producer = produce_in_background(up, stream)
        say(f"stream: {len(messages):,} messages at {args.rate:.0f}/s into the previous release")
        await_or_fail(
            lambda: _both_queries_committed(up), args.step_timeout,
            "the previous speed layer's first commits",
        )  # fmt: skip
        await_or_fail(lambda: answers(probe.url), args.step_timeout, "the previous pos-serve")
        threading.Thread(target=probe.run, name="probe", daemon=True).start()
        stream.release(warm)
        _batch(up, PREVIOUS / ".venv" / "bin", first, first + timedelta(hours=1), "batch-previous")
        say(f"previous release: running, {stream.sent:,} messages sent; upgrading")

        _upgrade_each_layer(up, probe)
        flowed = stream.sent < tail_at  # never held: it flowed through every step
        say(f"upgrade: done with {stream.sent:,} messages sent; the rest at once")
        stream.rate = 0.0
        stream.release(tail_at)
        producer.join(timeout=args.step_timeout)
        if producer.errors:  # type: ignore[attr-defined]
            raise StepFailed(f"the producer failed: {producer.errors[0]}")  # type: ignore[attr-defined]
        _catch_up(up)
        up.stop.set()
        probe.stop.set()
        sampler.join(timeout=30)
        for name in list(up.procs):
            stop_gracefully(up.procs.pop(name), timeout=120)
        whole_days = (
            first.replace(hour=0),
            last.replace(hour=0) + timedelta(days=1) if last.hour else last,
        )
        _batch(up, VENV_BIN, *whole_days, "batch-final")
        report = args.logs / "audit.json"
        steps.audit(args.ledger, report, up.env, args.logs / "audit.log", args.step_timeout)
        audited = story.parse_audit(json.loads(report.read_text()), str(report))
    finally:
        up.stop.set()
        for proc in up.procs.values():
            stop_gracefully(proc, timeout=60)
    exact = [v for v in audited.views if v.exact]
    gaps_view = json.loads(report.read_text())["views"].get("serving_gaps", {})
    doc = {
        "count": args.count,
        "rate": args.rate,
        "seed": args.seed,
        "previous": _previous_version(),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "stream_flowed_throughout": flowed,
        "speed_checkpoints": up.checkpoints,
        "steps": [asdict(f) for f in up.figures],
        "serving_errors_s": probe.error_seconds(0, time.monotonic()),
        "audit": {
            "clean": audited.clean,
            "exact_views": len(exact),
            "lost": sum(v.lost for v in exact),
            "duplicated": sum(v.duplicated for v in exact),
            "wrong": sum(v.wrong for v in exact),
            "gaps": gaps_view.get("note", ""),
        },
    }
    if args.out and str(args.out):
        Path(f"{args.out}.json").write_text(json.dumps(doc, indent=2) + "\n")
        Path(f"{args.out}.md").write_text(render(doc))
    say(render(doc))
    return doc


def _upgrade_each_layer(up: Upgrade, probe: Probe) -> None:
    """docs/upgrading.md's order, each step measured (`Upgrade.step`)."""
    first = up.interval[0]

    def processor(name: str, instance: str) -> None:
        env = {f"POS_{name.upper()}_INSTANCE_ID": f"upgrade-{instance}"}
        up.replace(f"{name}-{instance}", [f"pos-{name}", "run"], **env)

    up.step("schema", probe, lambda: _schema(up, VENV_BIN))
    for name in ("receipts", "alerts"):
        for instance in INSTANCES:
            up.step(f"{name} instance {instance}", probe, partial(processor, name, instance))
    up.step("alerts sink", probe, lambda: up.replace("sink", ["pos-alerts", "sink"]))
    up.step(
        "speed layer", probe,
        lambda: up.replace("speed", ["pos-speed", "run"], between=lambda: up.checkpoints.update(
            {job: {"last_batch_before": _committed_batches(up, job)[-1]} for job in SPEED_QUERIES}
        )),
    )  # fmt: skip
    # Read at once: the checkpoint keeps the last 100 batches' commit files only
    # (minBatchesToRetain), and the steps below run on for minutes.
    for job in SPEED_QUERIES:
        _first_after(up, job)
    window = (first, first + timedelta(hours=2))
    up.step("batch (the DAG's task)", probe, lambda: _batch(up, VENV_BIN, *window, "batch-current"))
    up.step("serving", probe, lambda: _serve_blue_green(up, probe, free_port()))
    up.step("backfill (pos-batch rebuild)", probe, lambda: _rebuild(up))


def _rebuild(up: Upgrade) -> None:
    argv = [str(VENV_BIN / "pos-batch"), "rebuild"]
    code = run_logged(argv, up.env, up.log("rebuild"), up.args.step_timeout, "the backfill")
    if code != 0:
        raise StepFailed(f"pos-batch rebuild exited {code}:\n{steps.tail(up.log('rebuild'))}")


def _committed_batches(up: Upgrade, job: str) -> list[int]:
    """The micro-batches the query `job` committed in its checkpoint, in order."""
    commits = up.settings.checkpoint_dir / job / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def _first_after(up: Upgrade, job: str) -> None:
    """Record this release's first committed batch of `job`, awaited: `last + 1` when it
    resumed the previous release's checkpoint. A fresh checkpoint would start again at 0,
    and never commit past `last` in the step's time: the wait fails, saying so."""
    resumed = up.checkpoints[job]
    before = resumed["last_batch_before"] or 0

    def later() -> list[int]:
        up.check_alive()
        return [b for b in _committed_batches(up, job) if b > before]

    await_or_fail(
        lambda: bool(later()), up.args.step_timeout,
        f"this release's {job} query to commit a batch past {before}",
    )  # fmt: skip
    resumed["first_batch_after"] = later()[0]


def _schema(up: Upgrade, release: Path) -> None:
    argv = [str(release / "pos-provision"), "schema"]
    code = run_logged(argv, up.env, up.log("schema"), up.args.step_timeout, "the schema")
    if code != 0:
        raise StepFailed(f"`{' '.join(argv)}` exited {code}")


def _previous_version() -> str:
    out = subprocess.run(
        [str(PREVIOUS / ".venv/bin/python"), "-c",
         "import importlib.metadata as m; print(m.version('pos-lambda'))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip() or "unknown"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def produce_in_background(up: Upgrade, stream: Counting) -> threading.Thread:
    from pos_lambda.producer.kafka_sink import produce

    s = up.settings
    errors: list[BaseException] = []

    def body() -> None:
        try:
            produce(stream, s.bootstrap_servers, s.topics.transactions, quiet=True,
                    flush_timeout_s=600)  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body, name="producer", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def render(doc: dict[str, Any]) -> str:
    """docs/upgrade.md: generated by `make upgrade-test` from docs/upgrade.json."""
    audit = doc["audit"]
    flow = (
        "flowed at its rate through every step"
        if doc["stream_flowed_throughout"]
        else "was HELD before the upgrade ended"
    )
    lines = [
        "# Upgrade under load: the figures",
        "",
        "Generated by `make upgrade-test` (dev/src/pos_lambda_dev/demo/upgrade.py) from "
        "docs/upgrade.json; the procedure is docs/upgrading.md's.",
        "",
        f"From {doc['previous']} to this checkout, {doc['count']:,} receipts at "
        f"{doc['rate']:.0f}/s (seed {doc['seed']}), every stream fault on; "
        f"{doc['minutes']} minutes in all. The stream "
        f"{flow}; "
        "the rest of it was sent at once after the last step.",
        "",
        "| step | took (s) | views gap (s) | pos.receipts gap (s) | pos.alerts gap (s) "
        "| serving errors (s) |",
        "|---|---|---|---|---|---|",
    ]
    for s in doc["steps"]:
        g = s["gaps_s"]
        lines.append(
            f"| {s['step']} | {s['seconds']} | {g['views']} | {g['receipts']} | "
            f"{g['alerts']} | {s['serving_errors_s']} |"
        )
    lines += [
        "",
        "A gap is the longest time between two commits of a series among those around the "
        "step (from its start until each series committed again). The processors' series "
        "are their group's committed input offsets: while one instance is replaced, the "
        "other goes on committing its partitions, and the replaced one's partitions wait "
        "for its successor, which takes them back at once (static membership).",
        "",
        f"Serving answered with an error for {doc['serving_errors_s']} s in all. Audit: "
        f"{'clean' if audit['clean'] else 'DISCREPANCIES'}, {audit['exact_views']} exact "
        f"views, {audit['lost']} lost, {audit['duplicated']} duplicated, "
        f"{audit['wrong']} wrong. The gaps view this release adds, backfilled by "
        f"`pos-batch rebuild`: {audit.get('gaps') or 'not audited'}.",
        "",
        "Checkpoints: this release's speed layer resumed the previous release's "
        "checkpoints (a fresh checkpoint would start again at batch 0):",
        "",
        "| query | previous release's last batch | this release's first batch |",
        "|---|---|---|",
        *(
            f"| {job} | {c['last_batch_before']} | {c['first_batch_after']} |"
            for job, c in doc.get("speed_checkpoints", {}).items()
        ),
        "",
    ]
    return "\n".join(lines)
