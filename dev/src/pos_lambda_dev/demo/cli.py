"""`pos-demo` (`make demo`): the whole pipeline end to end, then a short story.

    pos-demo                      # 5,000 receipts with every fault knob on
    pos-demo --count 2000 --seed 11 --no-alerts

Steps, each with a progress line: Kafka and Cassandra (started if not running); a
fresh demo namespace (the configured topic and alerts topic, keyspace, data dir and
the ledger `.state/demo-ledger` are deleted and created anew: the demo owns them, so
`make audit` afterwards audits this run); a simulated stream with resends, bursts,
late receipts (some beyond the speed layer's bound), out-of-order deliveries, clock
skew, malformed messages and conflicting copies; the speed layer over it
(`pos-speed run --available-now`) beside the alerts processor; the batch layer through
its Airflow DAG (`pos-infra airflow up`, then a `pos_batch` run over the data's hours,
awaited through Airflow's API); a query of the serving layer; the auditor
(`pos-audit`). Then the story: what was produced and injected, what each layer saw and
fixed, the verdict.

Logs (Spark, Airflow, the drivers) go to files under `.state/demo/` (Airflow's own under
`.state/airflow/logs/`); the terminal gets progress lines only. The demo leaves Kafka,
Cassandra and Airflow running (to look around: `make serve`, the Airflow UI) and says
how to stop them (`make airflow-down`, `make down`); `--stop-airflow` stops Airflow at
the end if the demo started it. Exit codes: 0 clean audit, 1 discrepancies or a failed
step (the message names its log), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pos_lambda import cli_args
from pos_lambda.settings import PROJECT_ROOT, Settings, load_settings
from pos_lambda_dev.demo import batch_dag, story
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    cql_session,
    env_with,
    group_caught_up,
    interrupt_on_sigterm,
    log_to_file,
    reset_dir,
    reset_keyspace,
    reset_topics,
    speed_totals,
    start_logged,
    stop_gracefully,
    tail,
)

STATE = PROJECT_ROOT / ".state"
FAULTS = {
    "resend_rate": 0.006,
    "burst_rate": 0.02,
    "late_rate": 0.03,
    # Log-uniform up to 72 h: most late receipts are minutes or hours late, a few are
    # beyond the speed layer's 48 h bound and reach the views through the batch layer.
    "late_max_delay_s": 72 * 3600.0,
    "out_of_order_rate": 0.01,
    "clock_skew_max_s": 30.0,
    "malformed_rate": 0.005,
    "lost_at_source_rate": 0.002,  # numbered by the till, never sent: gaps
}


def _start(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not ISO-8601: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"add a UTC offset, e.g. {text}+00:00")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--count", type=cli_args.positive_int, default=5000, help="unique receipts (5000)"
    )
    p.add_argument("--seed", type=int, default=7, help="simulation seed (7)")
    p.add_argument("--stores", type=cli_args.positive_int, default=20, help="stores (20)")
    p.add_argument(
        "--start",
        type=_start,
        help="simulated start, ISO-8601 with offset (default: 08:00 UTC three days ago)",
    )
    p.add_argument(
        "--conflict-rate", type=cli_args.fraction, default=0.005, help="conflicting copies (0.005)"
    )
    p.add_argument("--ledger", type=Path, default=STATE / "demo-ledger", help="ledger dir")
    p.add_argument("--logs", type=Path, default=STATE / "demo", help="log dir (.state/demo)")
    p.add_argument("--no-alerts", action="store_true", help="skip the alerts processor")
    p.add_argument(
        "--step-timeout",
        type=cli_args.positive_int,
        default=900,
        help="seconds any one step may take before the demo gives up (900)",
    )
    p.add_argument(
        "--stop-airflow",
        action="store_true",
        help="stop Airflow at the end if the demo started it",
    )
    return p


@dataclass
class Run:
    """What the demo started, so that the end stops exactly that."""

    settings: Settings
    args: argparse.Namespace
    say: Progress
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dag: batch_dag.DagRun | None = None
    airflow_started: bool = False
    # Airflow starting in the background while the stream is processed (`start_airflow`).
    airflow: Future[bool] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def overrides(self) -> dict[str, str]:
        """The namespace every subprocess (and the Airflow run's tasks) must use."""
        s = self.settings
        return {
            "POS_CASSANDRA_KEYSPACE": s.cassandra.keyspace,
            "POS_TOPIC_TRANSACTIONS": s.topics.transactions,
            "POS_TOPIC_ALERTS": s.topics.alerts,
            "POS_DATA_DIR": str(s.data_dir),
        }

    @property
    def env(self) -> dict[str, str]:
        return env_with(self.overrides)

    def log(self, name: str) -> Path:
        return Path(self.args.logs) / f"{name}.log"


# --- steps ---------------------------------------------------------------------------


def services(run: Run) -> None:
    from pos_lambda_dev.runtime import cassandra_service, jars, kafka_service

    jars.fetch(run.settings)
    for name, svc in (("Kafka", kafka_service), ("Cassandra", cassandra_service)):
        if svc.is_ready(run.settings):
            run.say(f"services: {name} is running")
        else:
            run.say(f"services: starting {name} (log {svc.process(run.settings).log_file}) ...")
            took = svc.start(run.settings)
            run.say(f"services: {name} ready in {took:.0f} s")


def reset(run: Run) -> None:
    s = run.settings
    run.say(
        f"reset: the demo's namespace anew: topics {s.topics.transactions}, {s.topics.alerts}; "
        f"keyspace {s.cassandra.keyspace}; data dir {s.data_dir}; ledger {run.args.ledger}"
    )
    reset_topics(
        s,
        {s.topics.transactions: s.topics.partitions, s.topics.alerts: s.topics.partitions},
        [s.alerts.group_id, s.alerts.sink_group_id],
    )
    reset_keyspace(s)
    reset_dir(s.data_dir)
    reset_dir(Path(run.args.ledger))


def produce(run: Run) -> tuple[dict[str, Any], datetime, datetime]:
    from pos_lambda.producer import ledger
    from pos_lambda.producer.kafka_sink import produce as send
    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate

    args = run.args
    now = datetime.now(UTC)
    start = args.start or (now - timedelta(days=3)).replace(
        hour=8, minute=0, second=0, microsecond=0
    )
    config = SimulationConfig(
        count=args.count, seed=args.seed, start=start, stores=args.stores,
        faults=FaultConfig(**FAULTS),
    )  # fmt: skip
    run.say(f"produce: simulating {args.count:,} receipts from {start:%Y-%m-%d %H:%M} UTC ...")
    result = simulate(config)
    mixed = add_conflicts(result.messages, args.conflict_rate, args.seed)
    summary = summary_with(result.summary, mixed.faults)
    summary["topic"] = run.settings.topics.transactions
    ledger.write(args.ledger, result.receipts, [*result.faults, *mixed.faults], summary)
    t0 = time.monotonic()
    stats = send(
        mixed.messages,
        run.settings.bootstrap_servers,
        run.settings.topics.transactions,
        quiet=True,
        security=run.settings.kafka.security_config,
    )
    summary["delivery"] = {"status": "complete", "acked": stats.acked}
    ledger.write_summary(args.ledger, summary)
    run.say(
        f"produce: {stats.acked:,} messages in Kafka in {time.monotonic() - t0:.1f} s "
        f"(ledger {args.ledger})"
    )
    happened = [datetime.fromisoformat(r["happened_at"]) for r in result.receipts]
    return summary, min(happened), max(happened)


def _wait(run: Run, proc: subprocess.Popen[bytes], what: str, log: Path) -> int:
    """Await a subprocess with a progress line every 20 s, bounded by --step-timeout."""
    t0 = time.monotonic()
    last = t0
    while proc.poll() is None:
        now = time.monotonic()
        if now - t0 > run.args.step_timeout:
            stop_gracefully(proc, 30)
            raise StepFailed(f"{what}: not done after {run.args.step_timeout} s; log {log}")
        if now - last >= 20:
            run.say(f"{what}: still running ({now - t0:.0f} s)")
            last = now
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    return proc.returncode


def speed_and_alerts(run: Run) -> tuple[story.SpeedSeen, story.AlertsSeen | None]:
    s = run.settings
    alerts_proc = None
    t_alerts = time.monotonic()
    if not run.args.no_alerts:
        argv = [str(VENV_BIN / "pos-alerts"), "run"]
        alerts_proc = start_logged(argv, run.env, run.log("alerts"))
        run.procs.append(alerts_proc)
        run.say(f"alerts: processor started (exactly once; log {run.log('alerts')})")
    log = run.log("speed")
    run.say(f"speed: pos-speed run --available-now (Spark driver log {log}) ...")
    t0 = time.monotonic()
    proc = start_logged([str(VENV_BIN / "pos-speed"), "run", "--available-now"], run.env, log)
    run.procs.append(proc)
    code = _wait(run, proc, "speed", log)
    if code != 0:
        raise StepFailed(f"speed: pos-speed exited {code}; log {log}:\n{tail(log)}")
    took = time.monotonic() - t0
    with cql_session(s) as cql:
        totals = speed_totals(cql)
    seen = story.SpeedSeen(
        micro_batches=int(totals["micro_batches"]),
        seconds=took,
        valid=int(totals["valid_rows"]),
        invalid=int(totals["invalid_rows"]),
        resends_absorbed=int(totals["resends_absorbed"]),
        conflicts=int(totals["conflicts"]),
        late=int(totals["late_receipts"]),
        beyond_bound=int(totals["beyond_lateness_bound"]),
    )
    run.say(
        f"speed: done in {took:.0f} s: {seen.valid:,} valid, {seen.invalid:,} dead letters, "
        f"{seen.resends_absorbed:,} resends absorbed, {seen.conflicts:,} conflicts"
    )
    if alerts_proc is None:
        return seen, None
    await_or_fail(
        lambda: group_caught_up(s, s.alerts.group_id, s.topics.transactions),
        run.args.step_timeout,
        "the alerts processor to commit the whole topic",
    )
    stop_gracefully(alerts_proc)
    run.say("alerts: processor caught up and stopped; copying committed alerts to Cassandra")
    code = subprocess.run(
        [str(VENV_BIN / "pos-alerts"), "sink", "--until-caught-up"],
        env=run.env,
        stdout=open(run.log("alerts-sink"), "ab"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        timeout=run.args.step_timeout,
    ).returncode
    if code != 0:
        raise StepFailed(f"alerts sink exited {code}; log {run.log('alerts-sink')}")
    with cql_session(s) as cql:
        rules = Counter(r.rule for r in cql.execute("SELECT rule FROM alerts", timeout=60))
    alerts = story.AlertsSeen(dict(rules), time.monotonic() - t_alerts)
    run.say(f"alerts: {sum(rules.values()):,} alerts in Cassandra")
    return seen, alerts


def _hour_floor(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def start_airflow(run: Run, pool: ThreadPoolExecutor) -> None:
    """Start Airflow (unless it runs) in the background: its ~10 s of start-up overlap the
    speed step instead of following it (the batch step awaits it: `airflow_ready`)."""
    run.airflow = pool.submit(batch_dag.ensure_airflow, run.settings, run.say)


def airflow_ready(run: Run) -> None:
    """Await the background start; a failure to start is raised here."""
    if run.airflow is None:
        run.airflow_started = batch_dag.ensure_airflow(run.settings, run.say)
        return
    run.airflow_started = run.airflow.result()


def batch(run: Run, first: datetime, last: datetime) -> story.BatchSeen:
    start, end = _hour_floor(first), _hour_floor(last) + timedelta(hours=1)
    airflow_ready(run)
    dag = batch_dag.run_dag(
        run.settings,
        run.overrides,
        start,
        end,
        f"demo-{datetime.now(UTC):%Y%m%dT%H%M%S}",
        run.say,
        run.args.step_timeout,
    )
    run.dag = dag
    row = batch_dag.committed_run(run.settings, start, end)
    windows_fixed, receipts_fixed = batch_dag.fixes(run.settings)
    return story.BatchSeen(
        dag_run_id=dag.run_id,
        interval_start=start,
        interval_end=end,
        lookback_hours=row.lookback_hours or 0.0,
        seconds=dag.seconds,
        input_rows=row.input_rows or 0,
        receipts=row.receipts or 0,
        duplicates_removed=row.duplicates_removed or 0,
        conflicts=row.conflicts or 0,
        beyond_speed_bound=row.beyond_speed_bound or 0,
        windows_fixed=windows_fixed,
        receipts_fixed=receipts_fixed,
    )


def serve(run: Run, first: datetime) -> story.Served:
    from pos_lambda.serving import Serving

    day = first.astimezone(UTC).date()
    with Serving(run.settings) as serving:
        top = serving.top_stores(day, limit=1)
        if not top.stores:
            raise StepFailed(f"serving: no store sold on {day}")
        store = top.stores[0].operation_id
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        answer = serving.windows(store, start, start + timedelta(days=1))
    rows = [w for w in answer.windows if w.receipt_count]
    served = story.Served(
        store=store,
        day=day.isoformat(),
        windows=len(rows),
        receipts=sum(w.receipt_count for w in rows),
        revenue=sum((w.revenue for w in rows), Decimal("0.00")),
        from_batch=sum(1 for w in rows if w.source == "batch"),
        from_speed=sum(1 for w in rows if w.source == "speed"),
        final=sum(1 for w in rows if w.final),
        horizon=answer.horizon,
    )
    run.say(
        f"serving: store {store} on {day}: {served.windows} windows, {served.receipts:,} "
        f"receipts, revenue {served.revenue} ({served.from_batch} from batch)"
    )
    return served


def audit(run: Run) -> story.Audited:
    from pos_lambda_dev.demo import steps

    report = Path(run.args.logs) / "audit.json"
    run.say(f"audit: pos-audit --ledger {run.args.ledger} --json {report} ...")
    steps.audit(Path(run.args.ledger), report, run.env, run.log("audit"), run.args.step_timeout)
    audited = story.parse_audit(json.loads(report.read_text()), str(report))
    run.say(f"audit: {'clean' if audited.clean else 'DISCREPANCIES'}")
    return audited


def _facts_from_ledger(run: Run, summary: dict[str, Any]) -> tuple[story.Produced, story.Injected]:
    from pos_lambda.producer import ledger

    receipts = ledger.load_receipts(run.args.ledger).values()
    bound = timedelta(hours=run.settings.speed.max_lateness_hours)
    beyond = sum(
        1
        for r in receipts
        if datetime.fromisoformat(r["first_sent_at"]) - datetime.fromisoformat(r["happened_at"])
        > bound
    )
    happened = [datetime.fromisoformat(r["happened_at"]).astimezone(UTC) for r in receipts]
    f = summary["faults"]
    produced = story.Produced(
        unique_receipts=summary["unique_receipts"],
        messages=summary["messages"],
        stores=summary["stores"],
        devices=summary["devices"],
        skewed_devices=summary["skewed_devices"],
        first_happened=min(happened),
        last_happened=max(happened),
        topic=run.settings.topics.transactions,
        ledger=str(run.args.ledger),
    )
    injected = story.Injected(
        resends=f["resend"],
        bursts=f["burst"],
        late=f["late"],
        beyond_bound=beyond,
        bound_hours=run.settings.speed.max_lateness_hours,
        out_of_order=f["out_of_order"],
        malformed=dict(summary.get("malformed_kinds", {})),
        conflicts=f.get("conflict", 0),
        clock_skew_max_s=FAULTS["clock_skew_max_s"],
    )
    return produced, injected


def _finish(run: Run) -> None:
    """Stop what the demo started (background processes; Airflow only if asked)."""
    for proc in run.procs:
        if proc.poll() is None:
            stop_gracefully(proc, 60)
    if run.airflow is not None and not run.airflow_started:  # a step failed before batch
        with contextlib.suppress(Exception):  # its failure to start changes nothing here
            run.airflow_started = run.airflow.result()
    stop = run.airflow_started and run.args.stop_airflow
    run.notes += batch_dag.restore(run.settings, run.dag, stop)
    if stop:
        run.say("airflow: stopped (the demo started it)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    say = Progress()
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    log_to_file(logs / "demo.log")
    settings = load_settings()
    run = Run(settings, args, say)
    say(f"pos-demo: logs go to {logs}/ (Airflow's to .state/airflow/logs/)")
    interrupt_on_sigterm()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflow-start")
    try:
        services(run)
        reset(run)
        summary, first, _ = produce(run)
        produced, injected = _facts_from_ledger(run, summary)
        start_airflow(run, pool)
        speed, alerts = speed_and_alerts(run)
        batch_seen = batch(run, produced.first_happened, produced.last_happened)
        served = serve(run, first)
        audited = audit(run)
    except StepFailed as exc:
        say(f"FAILED: {exc}")
        return 1
    except Exception as exc:  # a service error, Kafka or Cassandra unreachable, ...
        say(f"FAILED: {type(exc).__name__}: {exc} (details in {logs / 'demo.log'})")
        logging.getLogger("pos.demo").exception("demo failed")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        _finish(run)
        pool.shutdown()
    facts = story.DemoFacts(
        produced=produced,
        injected=injected,
        speed=speed,
        batch=batch_seen,
        served=served,
        audit=audited,
        alerts=alerts,
        seconds=say.elapsed,
        logs=str(logs),
        notes=run.notes,
    )
    text = story.render(facts)
    (logs / "story.txt").write_text(text)
    print("\n" + text, flush=True)
    stopped = run.airflow_started and args.stop_airflow
    running = "Kafka, Cassandra" + ("" if stopped else ", Airflow")
    print(
        f"Still running: {running}. Look around: `make serve`, `make audit`, the Airflow UI "
        f"(`pos-infra airflow up` prints its login). Stop: `make airflow-down`, `make down`.",
        flush=True,
    )
    return 0 if audited.clean else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
