"""`pos-chaos` (`make chaos`): faults while a bounded stream flows, then an audit.

    pos-chaos                          # 100,000 receipts (the issue's run, ~20 min)
    pos-chaos --count 5000 --rate 200  # a smaller rehearsal, labelled as such

The verdict is an end-to-end test, tests/e2e/test_chaos.py (marker `e2e`): every
planned fault made; 0 lost, 0 duplicated, 0 wrong; every view of the audit exact and
clean. `pos-chaos` and `make chaos` run that test through pytest
(`pytest -m e2e tests/e2e --count N --seed S --chaos-args '...'`); this module is the
machinery it drives (`run`) and the narration it prints.

While a seeded stream (resends, bursts, conflicting copies, late, out-of-order and
malformed messages) is produced at a steady rate into its own topic, the run strikes at
seeded random points of the stream: kill -9 of the speed-layer driver three times (in a
micro-batch: its checkpoint has an offsets entry without a commit), a hard restart of
the Kafka broker, a restart of Cassandra (kill -9, start), Cassandra down for longer
than the speed layer's restarts ride out (--outage-seconds), kill -9 of the batch job
mid-write (its crash point after the receipts, before the aggregates and the pointer; it
first waits for the master dataset if the archiver has not made it yet), oversized
malformed messages (up to 900 kB, in the ledger as dead letters to be), a foreign record
on the alerts topic, the alerts processor killed mid-transaction twice (started again
armed with its crash point: alerts on the broker, commit not made; a conflicting copy
held back from the stream makes sure a transaction with alerts comes), kill -9 of the
deduplicated topic's processor `pos-receipts run` from outside (recovered when its
restarted successor commits past where it was), kill -9 of the Airflow scheduler while a
DAG run's recompute runs, and a manual `pos-batch run` beside a DAG run of the same
hours (Airflow is started for these if it is not running). Whatever exits is started
again, as a process manager would. --fault-window puts the faults elsewhere in the
stream (0,0.15: all at its start). Then everything catches up (the speed layer's
checkpoints reach the topic's end offsets, the alerts and receipts groups commit them),
the batch layer runs through its Airflow DAG (`--batch direct`: `pos-batch run` +
`quality` without Airflow), the auditor compares every view with the ledger, and the
figures table is printed and written to `docs/chaos.md` and `docs/chaos.json` (`--out`).

Its own namespace: keyspace `pos_chaos`, topics `chaos.transactions`/`chaos.alerts`/
`chaos.receipts` (groups `chaos-alerts`, `chaos-alerts-sink`, `chaos-receipts`), data
dir `.state/chaos/data`, ledger `.state/chaos/ledger` (all reset at the start); logs
under `.state/chaos/logs/`. The Kafka and Cassandra restarts act on the local services
every other job uses: run it holding the machine's heavy-work lock. Every wait is
bounded (`--timeout` for the whole run); a finally block stops every process it started
(Airflow too, unless `--keep-airflow`) and starts Kafka and Cassandra again if a fault
left them down. Exit codes (pytest's): 0 the test passed, 1 it failed (discrepancies, a
fault not made, a failed step), 2 bad arguments or no tests/ directory (an installed
package carries no tests: run it from a checkout), 4 a pytest usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pos_lambda import cli_args
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import PROJECT_ROOT, load_settings
from pos_lambda_dev.demo import batch_dag, faults, figures, steps, story
from pos_lambda_dev.demo.chaos_context import NAMESPACE, STATE, Chaos, Counting
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from pos_lambda_dev.demo.faults import alerts_kill, oversized_malformed
from pos_lambda_dev.demo.faults.cassandra_outage import OUTAGE_S
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    cql_session,
    reset_dir,
    run_logged,
    stop_gracefully,
)

# The faults struck at the run are objects, one module each, in pos_lambda_dev.demo.faults
# (their registry and schedule in its __init__); this module runs their schedule.

# The stream's own faults (the simulator's rates), beside the faults struck at the run.
STREAM_FAULT_RATES = {
    "resend_rate": 0.01,
    "burst_rate": 0.02,
    "late_rate": 0.02,
    "late_max_delay_s": 72 * 3600.0,  # some beyond the speed layer's 48 h bound
    "out_of_order_rate": 0.01,
    "clock_skew_max_s": 30.0,
    "malformed_rate": 0.005,
    "lost_at_source_rate": 0.002,  # numbered by the till, never sent: gaps
}

DEFAULT_COUNT = 100_000
DEFAULT_SEED = 13
# The end-to-end test that gives the verdict, relative to the project root.
E2E_TEST = Path("tests") / "e2e" / "test_chaos.py"


def _window(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give START,END, e.g. 0,0.15") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= START < END <= 1")
    return lo, hi


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--count",
        type=cli_args.positive_int,
        default=DEFAULT_COUNT,
        help=f"unique receipts ({DEFAULT_COUNT})",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"stream and fault-plan seed ({DEFAULT_SEED})",
    )
    p.add_argument(
        "--rate", type=cli_args.positive_int, default=150, help="messages per second (150)"
    )
    p.add_argument("--stores", type=cli_args.positive_int, default=20, help="stores (20)")
    p.add_argument(
        "--conflict-rate", type=cli_args.fraction, default=0.002, help="conflicting copies"
    )
    p.add_argument(
        "--batch",
        choices=("airflow", "direct"),
        default="airflow",
        help="run the final batch through the Airflow DAG (default) or pos-batch directly",
    )
    p.add_argument(
        "--timeout", type=cli_args.positive_int, default=3600, help="whole run, seconds (3600)"
    )
    p.add_argument(
        "--step-timeout",
        type=cli_args.positive_int,
        default=900,
        help="one step or recovery, s (900)",
    )
    p.add_argument(
        "--fault-window",
        type=_window,
        default=figures.DEFAULT_WINDOW,
        metavar="START,END",
        help="fractions of the stream between which the faults strike "
        f"({figures.DEFAULT_WINDOW[0]},{figures.DEFAULT_WINDOW[1]}); 0,0.15 puts every one "
        "at the start, before the master dataset or a batch run exists",
    )
    p.add_argument(
        "--outage-seconds",
        type=cli_args.positive_int,
        default=OUTAGE_S,
        help=f"how long the Cassandra outage lasts ({OUTAGE_S}; longer than the speed "
        "layer's restarts of a failed driver ride out)",
    )
    p.add_argument("--out", type=Path, default=PROJECT_ROOT / "docs", help="chaos.md/.json dir")
    p.add_argument("--logs", type=Path, default=STATE / "logs", help="log dir")
    p.add_argument("--ledger", type=Path, default=STATE / "ledger", help="ledger dir")
    p.add_argument(
        "--keep-airflow",
        action="store_true",
        help="leave Airflow running at the end (default: stop it if this run started it)",
    )
    return p


# --- the run ---------------------------------------------------------------------------


def prepare(chaos: Chaos) -> tuple[list[OutgoingMessage], dict[str, Any]]:
    from pos_lambda.producer import ledger
    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
    from pos_lambda_dev.runtime import cassandra_service, jars, kafka_service

    s, args = chaos.settings, chaos.args
    jars.fetch(chaos.base)
    for name, svc in (("Kafka", kafka_service), ("Cassandra", cassandra_service)):
        if not svc.is_ready(chaos.base):
            chaos.say(f"services: starting {name} ...")
            svc.start(chaos.base)
        if svc.process(chaos.base).pid() is None:
            raise StepFailed(f"{name} answers but is not managed here: cannot restart it")
    chaos.say(
        f"reset: topics {s.topics.transactions}, {s.topics.alerts}, {s.topics.receipts}; "
        f"keyspace {s.cassandra.keyspace}; {s.data_dir}; ledger {args.ledger}"
    )
    steps.reset_topics(
        s,
        {t: s.topics.partitions for t in (s.topics.transactions, s.topics.alerts,
                                           s.topics.receipts)},
        [s.alerts.group_id, s.alerts.sink_group_id, s.receipts.group_id],
    )  # fmt: skip
    steps.reset_keyspace(s)
    reset_dir(s.data_dir)
    reset_dir(Path(args.ledger))
    start = (datetime.now(UTC) - timedelta(days=10)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    chaos.say(f"produce: simulating {args.count:,} receipts from {start:%Y-%m-%d} ...")
    result = simulate(
        SimulationConfig(
            count=args.count, seed=args.seed, start=start, stores=args.stores,
            faults=FaultConfig(**STREAM_FAULT_RATES),
        )
    )  # fmt: skip
    mixed = add_conflicts(result.messages, args.conflict_rate, args.seed)
    summary = summary_with(result.summary, mixed.faults)
    summary["topic"] = s.topics.transactions
    oversized = oversized_malformed.prepare(chaos, result.messages)
    summary = oversized_malformed.with_oversized(summary, oversized)
    ledger.write(args.ledger, result.receipts, [*result.faults, *mixed.faults, *oversized], summary)
    happened = [datetime.fromisoformat(r["happened_at"]) for r in result.receipts]
    first = min(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last = max(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    chaos.interval = (first, last + timedelta(hours=1))
    kills = sum(1 for f in chaos.plan.faults if f.kind == "alerts_kill")
    return alerts_kill.hold_back(chaos, mixed.messages, kills), summary


def send_held(chaos: Chaos) -> None:
    """Send the held-back copies no alerts kill took (the stream is over: their
    originals are out), so that the topic holds every message of the ledger."""
    while chaos.held:
        chaos.send(chaos.held.pop(0)[0])


def check_input_topic(chaos: Chaos, acknowledged: int) -> None:
    """Count the records the input topic holds against the messages the producer had
    acknowledged, once the stream is over. Fewer means the broker lost acknowledged
    messages that the producer's check (kafka_sink.check_acknowledged) did not restore.
    Then the topic is read whole, and the ledger's receipts none of whose copies it holds
    (`chaos.broker_lost`) are named in a note: the audit then finds them lost, and the
    verdict fails the run (docs/broker-loss.md)."""
    from confluent_kafka import TopicPartition

    from pos_lambda.adapters.kafka_clients import ConfluentClients
    from pos_lambda.producer import ledger

    s = chaos.settings
    topic = s.topics.transactions
    clients = ConfluentClients.from_settings(s)
    consumer = clients.offsets_reader("pos-chaos-count", log_level=2)
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in partitions}  # fmt: skip
        held = sum(high - low for low, high in ends.values())
        if held >= acknowledged:
            return
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        present: set[tuple[Any, Any, Any]] = set()
        todo = {p for p, (low, high) in ends.items() if high > low}
        while todo:
            message = consumer.poll(10)
            if message is None:
                raise StepFailed(f"reading {topic} back stalled with partitions {todo} left")
            if message.error():
                continue
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                value = json.loads(message.value() or b"")
                present.add(
                    (value.get("operation_id"), value.get("vendor_fiscal_module"),
                     value.get("transaction_id"))
                )  # fmt: skip
            partition, offset = message.partition(), message.offset()
            if partition is not None and offset is not None and offset + 1 >= ends[partition][1]:
                todo.discard(partition)
    finally:
        consumer.close()
    lost = {k: r for k, r in ledger.load_receipts(chaos.args.ledger).items() if k not in present}
    chaos.broker_lost = [[*k, r["window_start"]] for k, r in sorted(lost.items())]
    note = (
        f"the input topic {topic} holds {held:,} records of the {acknowledged:,} messages "
        f"the producer had acknowledged: {acknowledged - held:,} lost by the broker "
        f"(replication factor {s.topics.replication_factor}) before any layer read them; "
        f"receipts none of whose copies it holds: {[list(k) for k in sorted(lost)]}"
    )
    chaos.say(f"stream: {note}")
    chaos.notes.append(note)


def produce_in_background(chaos: Chaos, messages: list[OutgoingMessage]) -> threading.Thread:
    from pos_lambda.adapters.kafka_clients import ConfluentClients
    from pos_lambda.producer.kafka_sink import produce

    # Held at each planned fault's point until the fault strikes (see `storm`).
    holds = tuple(sorted({fault_point(f, len(messages)) for f in chaos.plan.faults}))
    chaos.stream = Counting(messages, chaos.args.rate, holds)
    errors: list[BaseException] = []
    s = chaos.settings
    # librdkafka's own lines (connection refused while the broker restarts) go to the
    # log file through `logger`, not to the terminal.
    client = ConfluentClients.from_settings(s).producer(
        logger=logging.getLogger("pos.chaos.producer")
    )

    def run() -> None:
        try:
            # A producer passed in has every acknowledgement read back after the flush
            # (kafka_sink.check_acknowledged): what a broker's kill -9 took back is resent.
            thread.stats = produce(  # type: ignore[attr-defined]
                chaos.stream or [],
                s.bootstrap_servers,
                s.topics.transactions,
                rate=0.0,  # the stream paces itself (Counting), holds and all
                quiet=True,
                # Delivery retries (idempotent: exactly once) outlast a broker restart.
                flush_timeout_s=600,
                producer=client,
            )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def fault_point(fault: figures.Planned, total: int) -> int:
    """The count of messages sent at which `fault` strikes."""
    return min(math.ceil(fault.at * total), total)


def storm(
    chaos: Chaos,
    producer: threading.Thread,
    total: int,
    registry: Mapping[str, faults.Fault[Any]] = faults.BY_NAME,
) -> None:
    """Strike the planned faults as the stream passes their points; keep processes up."""
    pending = list(chaos.plan.faults)
    faults_done = threading.Event()
    failure: list[BaseException] = []

    def striker() -> None:
        try:
            for fault in pending:
                point = fault_point(fault, total)
                while chaos.sent() < point and producer.is_alive():
                    time.sleep(0.2)  # pacing against the producer's count, not sync
                # The stream waits at the point (Counting's hold) until the fault is
                # prepared, and flows on while it strikes and recovers.
                chaos.prepared = faults.named(fault.kind, registry).prepare(chaos)
                if chaos.stream is not None:
                    chaos.stream.release(point)
                strike(chaos, fault, registry)
        except BaseException as exc:
            failure.append(exc)
        finally:
            faults_done.set()

    threading.Thread(target=striker, name="faults", daemon=True).start()
    last = time.monotonic()
    while producer.is_alive() or not faults_done.is_set():
        chaos.check_deadline("the stream and its faults")
        if failure:
            raise StepFailed(f"a fault could not be made: {failure[0]}")
        chaos.watch()
        if time.monotonic() - last >= 15:
            last = time.monotonic()
            chaos.say(
                f"stream: {chaos.sent():,} of {total:,} messages sent; "
                f"{len(chaos.outcomes)} fault(s) survived"
            )
        time.sleep(0.5)  # the watch loop's period
    if failure:
        raise StepFailed(f"a fault could not be made: {failure[0]}")
    errors = producer.errors  # type: ignore[attr-defined]
    if errors:
        raise StepFailed(f"the producer failed: {errors[0]}")
    held = chaos.stream.held_s if chaos.stream else 0.0
    chaos.say(f"stream: all {chaos.sent():,} messages sent and acknowledged (held "
              f"{held:,.0f} s at the faults' points while earlier faults recovered)")  # fmt: skip
    stats = getattr(producer, "stats", None)
    if stats is not None and stats.checked:
        note = f"producer: {stats.check_line()}"
        chaos.say(f"stream: {note}")
        chaos.notes.append(note)


def strike(
    chaos: Chaos,
    planned: figures.Planned,
    registry: Mapping[str, faults.Fault[Any]] = faults.BY_NAME,
) -> None:
    """Strike the fault the plan names, await its recovery, file what it records."""
    fault = faults.named(planned.kind, registry)
    at = chaos.sent()
    chaos.say(f"fault: {fault.label} at message {at:,} ...")
    t0 = time.monotonic()
    survived = fault.await_recovery(chaos, fault.strike(chaos))
    took = survived.recovered_s if survived.recovered_s is not None else time.monotonic() - t0
    chaos.outcomes.append(figures.Outcome(fault.name, at, took, survived.detail))
    chaos.say(f"fault: survived ({survived.detail}; {took:.0f} s)")


def catch_up(chaos: Chaos) -> None:
    s = chaos.settings
    chaos.say(
        "catch-up: awaiting the speed layer and the alerts and receipts processors at the "
        "topic's end"
    )
    last = time.monotonic()

    def done() -> bool:
        nonlocal last
        chaos.check_deadline("catch-up")
        chaos.watch()
        speed = steps.speed_caught_up(s)
        alerts = steps.group_caught_up(s, s.alerts.group_id, s.topics.transactions)
        receipts = steps.group_caught_up(s, s.receipts.group_id, s.topics.transactions)
        if time.monotonic() - last >= 15:
            last = time.monotonic()
            chaos.say(f"catch-up: speed {'done' if speed else 'working'}, alerts "
                      f"{'done' if alerts else 'working'}, receipts "
                      f"{'done' if receipts else 'working'}")  # fmt: skip
        return speed and alerts and receipts

    await_or_fail(done, chaos.args.step_timeout * 2,
                  "the speed layer, alerts and receipts to catch up")  # fmt: skip
    for name in ("speed", "alerts", "receipts"):
        proc = getattr(chaos, name)
        setattr(chaos, name, None)  # the watch must not start it again
        if proc is not None:
            code = stop_gracefully(proc)
            chaos.say(f"catch-up: {name} stopped (exit {code})")
    code = run_logged(
        [str(VENV_BIN / "pos-alerts"), "sink", "--until-caught-up"],
        chaos.env, chaos.log("alerts-sink"), chaos.args.step_timeout, "the alerts sink",
    )  # fmt: skip
    if code != 0:
        raise StepFailed(f"the alerts sink exited {code}; log {chaos.log('alerts-sink')}")
    chaos.say("catch-up: committed alerts copied to Cassandra")


def final_batch(chaos: Chaos) -> str:
    start, end = chaos.interval
    if chaos.args.batch == "airflow":
        # `|=`: an Airflow fault may have started it already; this run stops it either way.
        chaos.airflow_started |= batch_dag.ensure_airflow(chaos.base, chaos.say)
        chaos.dag = batch_dag.run_dag(
            chaos.base, NAMESPACE, start, end,
            f"chaos-{datetime.now(UTC):%Y%m%dT%H%M%S}", chaos.say, chaos.args.step_timeout,
        )  # fmt: skip
        return f"Airflow DAG pos_batch, run {chaos.dag.run_id} ({chaos.dag.seconds:.0f} s)"
    t0 = time.monotonic()
    for command in ("run", "quality"):
        code = run_logged(
            [str(VENV_BIN / "pos-batch"), command, "--start", start.isoformat(), "--end",
             end.isoformat()],
            chaos.env, chaos.log("batch"), chaos.args.step_timeout, f"pos-batch {command}",
        )  # fmt: skip
        if code != 0:
            raise StepFailed(f"pos-batch {command} exited {code}; log {chaos.log('batch')}")
    return f"pos-batch run + quality, without Airflow ({time.monotonic() - t0:.0f} s)"


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def gather(
    chaos: Chaos, summary: dict[str, Any], batch_via: str, audited: story.Audited
) -> figures.ChaosFacts:
    from pos_lambda.producer import ledger
    from pos_lambda.schemas import cql as tables

    s, args = chaos.settings, chaos.args
    committed = batch_dag.committed_runs(s)
    with cql_session(s) as cql:
        dead = steps.count_rows(cql, tables.DEAD_LETTERS_TABLE)
        conflict_rows = steps.count_rows(cql, tables.CONFLICTS_TABLE)
        rules = Counter(r.rule for r in cql.execute("SELECT rule FROM alerts", timeout=120))
    receipts = ledger.load_receipts(args.ledger).values()
    bound = timedelta(hours=s.speed.max_lateness_hours)
    beyond = sum(
        1
        for r in receipts
        if datetime.fromisoformat(r["first_sent_at"]) - datetime.fromisoformat(r["happened_at"])
        > bound
    )
    f = summary["faults"]
    return figures.ChaosFacts(
        count=args.count,
        seed=args.seed,
        full=args.count >= 100_000,
        messages=summary["messages"],
        resends=f["resend"],
        conflicts_injected=f.get("conflict", 0),
        malformed=f["malformed"],
        late=summary["late_receipts"],
        beyond_bound=beyond,
        outcomes=sorted(chaos.outcomes, key=lambda o: o.at_message),
        planned=len(chaos.plan.faults),
        restarts=chaos.restarts,
        duplicates_removed=sum(r.duplicates_removed or 0 for r in committed),
        conflicts_found=sum(r.conflicts or 0 for r in committed),
        conflict_rows=conflict_rows,
        conflict_alerts=rules.get("conflict", 0),
        dead_letters=dead,
        batch_via=batch_via,
        audit=audited,
        seconds=chaos.say.elapsed,
        when=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        commit=_commit(),
        notes=chaos.notes,
        broker_lost=chaos.broker_lost,
    )


def restore_faults(
    chaos: Chaos, registry: Mapping[str, faults.Fault[Any]] = faults.BY_NAME
) -> None:
    """Each planned fault undoes what it may have left (once per fault, in plan order);
    one that cannot is said, and the others still run: a cleanup never raises."""
    for kind in dict.fromkeys(p.kind for p in chaos.plan.faults):
        try:
            faults.named(kind, registry).restore(chaos)
        except Exception as exc:
            chaos.say(f"cleanup: could not undo {kind}: {exc}")


def _cleanup(chaos: Chaos) -> None:
    from pos_lambda_dev.runtime import cassandra_service, kafka_service

    if chaos.stream is not None:
        chaos.stream.stop.set()
    for proc in chaos.procs:
        if proc.poll() is None:
            stop_gracefully(proc, 60)
    restore_faults(chaos)
    # A failure between a kill and its start must not leave the machine without them.
    for name, svc in (("Kafka", kafka_service), ("Cassandra", cassandra_service)):
        try:
            if not svc.is_ready(chaos.base):
                chaos.say(f"cleanup: starting {name} again")
                svc.start(chaos.base)
        except Exception as exc:
            chaos.say(f"cleanup: could not start {name}: {exc}; run `make up`")
    if chaos.triggered:
        chaos.notes += batch_dag.fail_unfinished(chaos.base, [t.run_id for t in chaos.triggered])
    if any(t.was_paused for t in chaos.triggered) and chaos.dag is None:
        chaos.notes += batch_dag.pause_again(chaos.base)
    stop = chaos.airflow_started and not chaos.args.keep_airflow
    chaos.notes += batch_dag.restore(chaos.base, chaos.dag, stop)


def run(args: argparse.Namespace) -> figures.ChaosFacts:
    """The whole chaos run; its facts (the figures table is printed and written to
    `args.out` as before). Raises StepFailed (or the error) when a step fails; the
    verdict over the facts is the end-to-end test's (tests/e2e/test_chaos.py)."""
    say = Progress()
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    steps.log_to_file(Path(args.logs) / "chaos.log")
    base = load_settings()
    settings = load_settings(
        cassandra_keyspace=NAMESPACE["POS_CASSANDRA_KEYSPACE"],
        topic_transactions=NAMESPACE["POS_TOPIC_TRANSACTIONS"],
        topic_alerts=NAMESPACE["POS_TOPIC_ALERTS"],
        alerts_group_id=NAMESPACE["POS_ALERTS_GROUP_ID"],
        alerts_sink_group_id=NAMESPACE["POS_ALERTS_SINK_GROUP_ID"],
        alerts_instance_id=NAMESPACE["POS_ALERTS_INSTANCE_ID"],
        topic_receipts=NAMESPACE["POS_TOPIC_RECEIPTS"],
        receipts_group_id=NAMESPACE["POS_RECEIPTS_GROUP_ID"],
        receipts_instance_id=NAMESPACE["POS_RECEIPTS_INSTANCE_ID"],
        data_dir=Path(NAMESPACE["POS_DATA_DIR"]),
    )
    fault_plan = figures.plan(args.seed, window=args.fault_window)
    chaos = Chaos(settings, base, args, say, fault_plan)
    chaos.deadline = time.monotonic() + args.timeout
    say(f"pos-chaos: {args.count:,} receipts at {args.rate}/s, seed {args.seed}; logs {args.logs}")
    say("plan: " + ", ".join(f"{f.kind} at {f.at:.0%}" for f in fault_plan.faults))
    steps.interrupt_on_sigterm()
    try:
        messages, summary = prepare(chaos)
        chaos.start_speed()
        chaos.start_alerts()
        chaos.start_receipts()
        say(f"speed, alerts and receipts started (logs {chaos.log('speed')}, "
            f"{chaos.log('alerts')}, {chaos.log('receipts')})")  # fmt: skip
        producer = produce_in_background(chaos, messages)
        storm(chaos, producer, len(messages))
        send_held(chaos)
        check_input_topic(chaos, summary["messages"])
        catch_up(chaos)
        batch_via = final_batch(chaos)
        report = Path(args.logs) / "audit.json"
        say(f"audit: pos-audit --ledger {args.ledger} --json {report} ...")
        steps.audit(Path(args.ledger), report, chaos.env, chaos.log("audit"), args.step_timeout)
        audited = story.parse_audit(json.loads(report.read_text()), str(report))
        facts = gather(chaos, summary, batch_via, audited)
    except StepFailed as exc:
        say(f"FAILED: {exc}")
        raise
    except KeyboardInterrupt:
        say("interrupted")
        raise
    except Exception as exc:
        say(f"FAILED: {type(exc).__name__}: {exc} (details in {Path(args.logs) / 'chaos.log'})")
        logging.getLogger("pos.chaos").exception("chaos failed")
        raise
    finally:
        _cleanup(chaos)
    table = figures.render(facts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.md").write_text(table)
    (out / "chaos.json").write_text(json.dumps(figures.as_json(facts), indent=2, default=str))
    print("\n" + table, flush=True)
    say(f"figures written to {out / 'chaos.md'} and {out / 'chaos.json'}")
    return facts


def _count_and_seed() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--count")
    p.add_argument("--seed")
    return p


def pytest_argv(argv: list[str], root: Path = PROJECT_ROOT) -> list[str]:
    """pytest's arguments for a `pos-chaos` command line (already validated): the e2e
    test, -s so that the narration reaches the terminal as it happens, --count and
    --seed as the test's own options, every other option in --chaos-args."""
    known, rest = _count_and_seed().parse_known_args(argv)
    count = known.count if known.count is not None else str(DEFAULT_COUNT)
    seed = known.seed if known.seed is not None else str(DEFAULT_SEED)
    # `=`: a value that starts with "--" (e.g. "--keep-airflow") is not taken for an option.
    return [str(root / E2E_TEST), "-m", "e2e", "-s", "--count", count, "--seed", seed,
            f"--chaos-args={shlex.join(rest)}"]  # fmt: skip


def main(argv: list[str] | None = None, root: Path = PROJECT_ROOT) -> int:
    """`pos-chaos`: the end-to-end test tests/e2e/test_chaos.py, run by pytest."""
    argv = sys.argv[1:] if argv is None else argv
    build_parser().parse_args(argv)  # --help, and bad arguments fail here (exit 2)
    test = root / E2E_TEST
    if not test.is_file():
        print(
            f"pos-chaos: {test} is not here: the chaos run is an end-to-end test of the "
            "repository (tests/e2e), which an installed package does not carry; run it from "
            "a checkout (`make chaos`)",
            file=sys.stderr,
        )
        return 2
    try:
        import pytest
    except ImportError:
        print("pos-chaos: needs pytest (the project's dev extra: `make setup`)", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    return int(pytest.main(pytest_argv(argv, root), plugins=[]))


if __name__ == "__main__":
    sys.exit(main())
