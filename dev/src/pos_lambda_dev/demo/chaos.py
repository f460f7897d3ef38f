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
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pos_lambda import cli_args
from pos_lambda.adapters.service import wait_for
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import PROJECT_ROOT, Settings, load_settings
from pos_lambda_dev.demo import batch_dag, figures, steps, story
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    children,
    cql_session,
    driver_jobs,
    env_with,
    reset_dir,
    run_logged,
    start_logged,
    stop_gracefully,
    tail,
)

STATE = PROJECT_ROOT / ".state" / "chaos"
FAULTS = {
    "resend_rate": 0.01,
    "burst_rate": 0.02,
    "late_rate": 0.02,
    "late_max_delay_s": 72 * 3600.0,  # some beyond the speed layer's 48 h bound
    "out_of_order_rate": 0.01,
    "clock_skew_max_s": 30.0,
    "malformed_rate": 0.005,
}
NAMESPACE = {
    "POS_CASSANDRA_KEYSPACE": "pos_chaos",
    "POS_TOPIC_TRANSACTIONS": "chaos.transactions",
    "POS_TOPIC_ALERTS": "chaos.alerts",
    "POS_ALERTS_GROUP_ID": "chaos-alerts",
    "POS_ALERTS_SINK_GROUP_ID": "chaos-alerts-sink",
    "POS_ALERTS_INSTANCE_ID": "chaos-1",
    "POS_TOPIC_RECEIPTS": "chaos.receipts",
    "POS_RECEIPTS_GROUP_ID": "chaos-receipts",
    "POS_RECEIPTS_INSTANCE_ID": "chaos-1",
    "POS_DATA_DIR": str(STATE / "data"),
}


# The Cassandra outage: the speed layer's supervisor restarts a failed driver at once,
# then after 2, 4, 8, 16 s, 5 times within 10 min (POS_SPEED_MAX_RESTARTS,
# POS_SPEED_RESTART_*): 90 s outlast a micro-batch's retries and some of those restarts.
OUTAGE_S = 90
# Oversized malformed messages, in bytes: just over the contract's 64 KiB, larger, and
# near Kafka's default 1 MB message limit.
OVERSIZED_BYTES = (64 * 1024 + 1, 300_000, 900_000)

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


class Counting:
    """Wraps the messages so the orchestrator knows how many the producer has taken;
    `stop` ends the stream early (the producer then flushes what it holds).

    With `holds` (counts of messages sent), the stream waits at each one until
    `release` opens it: a fault's point is not passed before the fault strikes, so
    every fault strikes while the stream flows, however long the faults before it
    took to recover (struck in turn, they outlast a stream sent at a fixed rate). The
    stream keeps its own pace (`rate` messages per second, 0: unlimited) and starts it
    again after a hold, so that a hold is not followed by a burst to catch up."""

    def __init__(
        self,
        messages: list[OutgoingMessage],
        rate: float = 0.0,
        holds: tuple[int, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.messages = messages
        self.sent = 0
        self.stop = threading.Event()
        self.rate = rate
        self.held_s = 0.0  # time spent waiting at holds
        self._holds = set(holds)
        self._open = threading.Condition()
        self._clock = clock

    def release(self, hold: int) -> None:
        """Let the stream past `hold` (a count given in `holds`; any other is a no-op)."""
        with self._open:
            self._holds.discard(hold)
            self._open.notify_all()

    def _wait_at(self, sent: int) -> bool:
        """Wait while `sent` is held; False when the stream was stopped meanwhile."""
        with self._open:
            if sent not in self._holds:
                return True
            t0 = self._clock()
            while sent in self._holds and not self.stop.is_set():
                self._open.wait(0.5)  # re-checks `stop`, which sets no condition
            self.held_s += self._clock() - t0
            return not self.stop.is_set()

    def __iter__(self) -> Iterator[OutgoingMessage]:
        paced_from, paced = self._clock(), 0
        for m in self.messages:
            if self.stop.is_set():
                return
            if self.sent in self._holds:
                if not self._wait_at(self.sent):
                    return
                paced_from, paced = self._clock(), 0  # the pace again, from now
            if self.rate > 0:
                # Pacing to the stream's rate (not synchronisation): this message's slot.
                ahead = paced_from + paced / self.rate - self._clock()
                if ahead > 0:
                    time.sleep(ahead)
                paced += 1
            self.sent += 1
            yield m


@dataclass
class Chaos:
    settings: Settings  # the chaos namespace
    base: Settings  # the services' own (state dir, ports)
    args: argparse.Namespace
    say: Progress
    plan: figures.Plan
    speed: subprocess.Popen[bytes] | None = None
    alerts: subprocess.Popen[bytes] | None = None
    receipts: subprocess.Popen[bytes] | None = None  # `pos-receipts run`
    # The alerts kill still to be made: the processor is (re)started with its crash
    # point until it strikes.
    alerts_armed: bool = False
    # Each kill the crash point made: when, and the group's committed offsets then.
    alerts_kills: list[tuple[float, dict[int, int] | None]] = field(default_factory=list)
    # Conflicting copies held back from the stream, one per alerts kill: each makes a
    # transaction with an alert (a conflict) for an armed processor, even once the
    # stream is over. Only their sending is later; the ledger has them from the start.
    # Each with how many stream messages must be sent first (its original among them):
    # a copy sent before its original would win in its place.
    held: list[tuple[OutgoingMessage, int]] = field(default_factory=list)
    # DAG runs the Airflow faults triggered (the DAG is paused again at the end).
    triggered: list[batch_dag.Triggered] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    outcomes: list[figures.Outcome] = field(default_factory=list)
    restarts: int = 0
    notes: list[str] = field(default_factory=list)
    stream: Counting | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    deadline: float = 0.0
    dag: batch_dag.DagRun | None = None
    airflow_started: bool = False  # by this run (then stopped at the end)
    interval: tuple[datetime, datetime] = (datetime.min, datetime.min)  # the data's hours
    # Messages a fault sends (in the ledger from the start, sent when it strikes).
    oversized: list[OutgoingMessage] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return env_with(NAMESPACE)

    def log(self, name: str) -> Path:
        return Path(self.args.logs) / f"{name}.log"

    def sent(self) -> int:
        return self.stream.sent if self.stream else 0

    def check_deadline(self, what: str) -> None:
        if time.monotonic() > self.deadline:
            raise StepFailed(f"the whole run passed --timeout {self.args.timeout} s during {what}")

    # --- processes ----------------------------------------------------------------

    def start_speed(self) -> None:
        self.speed = start_logged([str(VENV_BIN / "pos-speed"), "run"], self.env, self.log("speed"))
        self.procs.append(self.speed)

    def start_alerts(self) -> None:
        env = self.env
        if self.alerts_armed:  # killed in its first transaction that produces alerts
            env |= {"POS_ALERTS_CRASH_POINT": "kill_after_produce",
                    "POS_ALERTS_CRASH_AT_TRANSACTION": "1"}  # fmt: skip
        self.alerts = start_logged([str(VENV_BIN / "pos-alerts"), "run"], env, self.log("alerts"))
        self.procs.append(self.alerts)

    def start_receipts(self) -> None:
        self.receipts = start_logged(
            [str(VENV_BIN / "pos-receipts"), "run"], self.env, self.log("receipts")
        )
        self.procs.append(self.receipts)

    def _alerts_committed(self) -> dict[int, int] | None:
        s = self.settings
        with contextlib.suppress(Exception):  # a coordinator moving, the broker restarting
            return steps.committed(s, s.alerts.group_id, s.topics.transactions)
        return None

    def _receipts_committed(self) -> dict[int, int] | None:
        s = self.settings
        with contextlib.suppress(Exception):  # a coordinator moving, the broker restarting
            return steps.committed(s, s.receipts.group_id, s.topics.transactions)
        return None

    def watch(self) -> None:
        """Start again whatever exited, as a process manager would; note the kills the
        alerts processor's crash point made."""
        with self.lock:
            if self.speed is not None and self.speed.poll() is not None:
                code = self.speed.returncode
                self.say(f"watch: pos-speed exited {code}; starting it again")
                self.restarts += 1
                self.start_speed()
            if self.alerts is not None and self.alerts.poll() is not None:
                code = self.alerts.returncode
                if code == -signal.SIGKILL and self.alerts_armed:
                    self.alerts_kills.append((time.monotonic(), self._alerts_committed()))
                    self.alerts_armed = False
                    self.say("watch: the alerts processor killed itself mid-transaction; "
                             "starting it again")  # fmt: skip
                else:
                    # Exited before its crash point (e.g. Cassandra was down at its
                    # start): still armed, the next process makes the kill.
                    self.say(f"watch: pos-alerts exited {code}; starting it again")
                self.restarts += 1
                self.start_alerts()
            if self.receipts is not None and self.receipts.poll() is not None:
                code = self.receipts.returncode
                self.say(f"watch: pos-receipts exited {code}; starting it again")
                self.restarts += 1
                self.start_receipts()

    # --- faults ---------------------------------------------------------------------

    def _driver(self) -> int | None:
        """The views query's driver process (the supervisor's `--driver` child running
        it: the only one, or one of two when each query has its own)."""
        if self.speed is None or self.speed.poll() is not None:
            return None
        for pid in children(self.speed.pid):
            if "views" in (driver_jobs(pid) or "").split(","):
                return pid
        return None

    def _last_commit(self) -> int:
        commits = self.settings.checkpoint_dir / "views" / "commits"
        with contextlib.suppress(FileNotFoundError):
            return max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)
        return -1

    def _in_micro_batch(self) -> bool:
        views = self.settings.checkpoint_dir / "views"

        def ids(sub: str) -> list[int]:
            with contextlib.suppress(FileNotFoundError):
                return sorted(int(p.name) for p in (views / sub).iterdir() if p.name.isdigit())
            return []

        offsets, commits = ids("offsets"), ids("commits")
        return bool(offsets) and (not commits or offsets[-1] > commits[-1])

    def speed_kill(self) -> str:
        got: list[int] = []

        def driver_busy() -> bool:
            pid = self._driver()
            if pid is None:
                return False
            got[:] = [pid]
            return self._in_micro_batch()

        flowing = self.stream is not None and self.sent() < len(self.stream.messages)
        # While the stream flows a micro-batch starts every few seconds; after it, the
        # layer may be idle and there is none to catch.
        busy = wait_for(driver_busy, timeout=120 if flowing else 30, interval=0.05)
        if not got:
            raise StepFailed(f"no speed-layer driver to kill; log {self.log('speed')}")
        before = self._last_commit()
        os.kill(got[0], signal.SIGKILL)
        where = "in a micro-batch" if busy else "between micro-batches"
        how: list[str] = []

        def recovered() -> bool:
            if self._last_commit() > before:
                how[:] = ["a new driver committed its replay"]
                return True
            # Nothing left to replay: a new driver runs and the views query is at the end.
            if self._driver() not in (None, got[0]) and steps.speed_caught_up(
                self.settings, ("views",)
            ):
                how[:] = ["a new driver runs, nothing was left to replay"]
                return True
            return False

        await_or_fail(recovered, self.args.step_timeout, "a new speed driver to recover")
        return f"driver pid {got[0]} killed {where}; {how[0]}"

    def kafka_restart(self) -> str:
        from pos_lambda_dev.runtime import kafka_service

        if not kafka_service.process(self.base).kill():
            raise StepFailed("Kafka is not managed here (no pid file): cannot restart it")
        took = kafka_service.start(self.base)
        return f"broker back in {took:.0f} s"

    def cassandra_restart(self) -> str:
        from pos_lambda_dev.runtime import cassandra_service

        if not cassandra_service.process(self.base).kill():
            raise StepFailed("Cassandra is not managed here (no pid file): cannot restart it")
        took = cassandra_service.start(self.base)
        return f"node back in {took:.0f} s"

    def _await_master_dataset(self) -> None:
        """A batch fault needs a master dataset to read: the archiver creates it with its
        first micro-batch, which on a loaded machine (or after an early fault hit the
        drivers' start) can come after the plan's point."""
        log = self.settings.master_dataset_dir / "_delta_log"
        if not any(log.glob("*.json")):
            self.say("fault: awaiting the archiver's first commit (the master dataset) ...")
            await_or_fail(
                lambda: any(log.glob("*.json")),
                self.args.step_timeout,
                "the archiver to create the master dataset",
            )

    def batch_kill(self) -> str:
        start, end = self.interval
        # The job dies mid-write only if it has a master dataset to read.
        self._await_master_dataset()
        env = self.env | {"POS_BATCH_CRASH_POINT": "after_receipts"}
        code = run_logged(
            [str(VENV_BIN / "pos-batch"), "run", "--start", start.isoformat(), "--end",
             end.isoformat()],
            env, self.log("batch-killed"), self.args.step_timeout, "the batch job to be killed",
        )  # fmt: skip
        if code != -signal.SIGKILL:
            raise StepFailed(
                f"the batch job exited {code} instead of dying at its crash point; log "
                f"{self.log('batch-killed')}:\n{tail(self.log('batch-killed'))}"
            )
        return "killed after writing its receipts, before its aggregates and pointer"

    def _views_committed_after(self, before: int, what: str) -> None:
        """A new micro-batch committed, or (the stream over) the query at the topic's end."""

        def working() -> bool:
            self.watch()
            return self._last_commit() > before or (
                self.sent() >= len(self.stream.messages if self.stream else [])
                and steps.speed_caught_up(self.settings, ("views",))
            )

        await_or_fail(working, self.args.step_timeout, what)

    def cassandra_outage(self) -> str:
        """Cassandra stopped (kill -9) for --outage-seconds while the stream flows: the
        speed drivers fail and restart with back-off (their supervisor may give up and
        be started again by the watch, as a process manager would); recovered when the
        views query commits a micro-batch after the node is back."""
        from pos_lambda_dev.runtime import cassandra_service

        if not cassandra_service.process(self.base).kill():
            raise StepFailed("Cassandra is not managed here (no pid file): cannot stop it")
        before = self._last_commit()
        self.say(f"fault: Cassandra down for {self.args.outage_seconds} s ...")
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.args.outage_seconds:
            self.check_deadline("the Cassandra outage")
            self.watch()
            time.sleep(0.5)  # the outage's length is the fault itself, not a wait
        took = cassandra_service.start(self.base)
        back = time.monotonic()
        self._views_committed_after(before, "the views query to commit after the outage")
        return (
            f"down {self.args.outage_seconds} s, node back in {took:.0f} s, views committed "
            f"{time.monotonic() - back:.0f} s later"
        )

    def oversized_malformed(self) -> str:
        """Receipts padded past the contract's size, sent mid-stream by a second
        idempotent producer; recovered when each is a dead letter (found by its bytes'
        fingerprint, as the auditor finds it)."""
        import hashlib

        from pos_lambda.producer.kafka_sink import produce
        from pos_lambda.schemas import cql as tables

        s = self.settings
        sent = produce(self.oversized, s.bootstrap_servers, s.topics.transactions, quiet=True)
        want = {hashlib.sha256(m.value).hexdigest() for m in self.oversized}

        def dead_lettered() -> bool:
            with contextlib.suppress(Exception), cql_session(s) as cql:  # Cassandra restarting
                rows = cql.execute(
                    f"SELECT value_sha256 FROM {tables.DEAD_LETTERS_TABLE}", timeout=60
                )
                return want <= {r.value_sha256 for r in rows}
            return False

        await_or_fail(dead_lettered, self.args.step_timeout, "the oversized dead letters", 2.0)
        sizes = ", ".join(f"{len(m.value):,}" for m in self.oversized)
        return f"{sent.acked} messages of {sizes} bytes, each a dead letter (too_large)"

    def foreign_alert(self) -> str:
        """A record that is no alert, written to the alerts topic by someone else: the
        sink must skip it and go on (recovered when the sink's group is past it), and the
        auditor must report it without taking it for the pipeline's output."""
        from confluent_kafka import Producer

        from pos_lambda.producer.kafka_sink import producer_config

        s = self.settings
        client = Producer(producer_config(s.bootstrap_servers, True, s.kafka.security_config))
        where: list[tuple[int, int]] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                where.append((int(msg.partition()), int(msg.offset())))

        client.produce(
            s.topics.alerts, key=b"not-an-alert", value=b'{"hello": "from elsewhere"}',
            on_delivery=delivered,
        )  # fmt: skip
        if client.flush(60) != 0 or not where:
            raise StepFailed("the foreign record was not acknowledged by Kafka")
        partition, offset = where[0]

        def past_it() -> bool:
            with contextlib.suppress(Exception):  # no commit yet, a coordinator moving
                got = steps.committed(s, s.alerts.sink_group_id, s.topics.alerts)
                return got.get(partition, -1) > offset
            return False

        sink = start_logged(
            [str(VENV_BIN / "pos-alerts"), "sink"], self.env, self.log("alerts-sink-foreign")
        )
        self.procs.append(sink)
        try:
            await_or_fail(
                lambda: past_it() or sink.poll() is not None,
                self.args.step_timeout, "the alerts sink to pass the foreign record",
            )  # fmt: skip
            if sink.poll() is not None:
                raise StepFailed(
                    f"the alerts sink exited {sink.returncode} on a foreign record; log "
                    f"{self.log('alerts-sink-foreign')}:\n{tail(self.log('alerts-sink-foreign'))}"
                )
        finally:
            stop_gracefully(sink, 60)
        return f"at {s.topics.alerts} [{partition}] @{offset}: skipped by the sink, which went on"

    def alerts_kill(self) -> tuple[str, float]:
        """The alerts processor killed mid-transaction: stopped, started again armed to
        kill itself in its first transaction that produces alerts (on the broker, the
        commit not made), sent a held-back conflicting copy so that such a transaction
        comes even after the stream. Recovered when its restarted successor commits: the
        group's committed offsets move past those at the kill."""
        with self.lock:  # the watch must not start it meanwhile
            old, self.alerts = self.alerts, None
        if old is not None:
            stop_gracefully(old, 60)
        made = len(self.alerts_kills)
        with self.lock:
            self.alerts_armed = True
            self.start_alerts()
        # A copy whose original is out already; else the stream's own alerts strike.
        ready = [i for i, (_, after) in enumerate(self.held) if after <= self.sent()]
        trigger = self.held.pop(ready[0])[0] if ready else None
        if trigger is not None:
            self._send(trigger)
        await_or_fail(
            lambda: len(self.alerts_kills) > made,
            self.args.step_timeout,
            "the alerts processor to reach its crash point",
        )
        t_kill, before = self.alerts_kills[made]

        def committed_again() -> bool:
            nonlocal before
            now = self._alerts_committed()
            if before is None:  # no snapshot at the kill: measure from this one
                before = now
                return False
            return now is not None and now != before

        await_or_fail(committed_again, self.args.step_timeout, "the restarted alerts processor "
                      "to commit")  # fmt: skip
        how = "a held-back conflicting copy sent" if trigger is not None else "the stream's"
        return (
            f"killed itself in its first transaction with alerts ({how}), the alerts on "
            "the broker, uncommitted; its successor committed",
            round(time.monotonic() - t_kill, 1),
        )

    def receipts_kill(self) -> tuple[str, float]:
        """kill -9 of the deduplicated topic's processor (`pos-receipts run`) from outside
        while the stream flows, once it has committed: whatever transaction it had open
        stays on the broker uncommitted (its successor, with the same transactional.id,
        aborts it). The watch starts it again, as a process manager would. Recovered when
        the successor runs and the group's committed offsets are past those at the kill
        (or, nothing left to read, the group is at the topic's end)."""
        before: list[dict[int, int]] = []

        def running_and_committed() -> bool:
            now = self._receipts_committed()
            proc = self.receipts
            if proc is None or proc.poll() is not None or not now or not any(now.values()):
                return False
            before[:] = [now]
            return True

        await_or_fail(running_and_committed, self.args.step_timeout,
                      "the receipts processor to run and commit", 0.5)  # fmt: skip
        with self.lock:  # the watch starts its successor only after this snapshot
            old = self.receipts
            assert old is not None
            os.kill(old.pid, signal.SIGKILL)
            t_kill = time.monotonic()
            old.wait(timeout=30)
            # Where the dead one was: nothing moves the group's offsets until its
            # successor commits (a read failing while the broker restarts: the last seen).
            at_kill = next((c for _ in range(3) if (c := self._receipts_committed())), before[0])
        how: list[str] = []

        def committed_again() -> bool:
            self.watch()
            proc = self.receipts
            if proc is None or proc is old or proc.poll() is not None:
                return False
            now = self._receipts_committed()
            if now is not None and committed_past(at_kill, now):
                how[:] = ["its successor committed past the kill's offsets"]
                return True
            s = self.settings
            stream_over = self.sent() >= len(self.stream.messages if self.stream else [])
            if (
                stream_over
                and now == at_kill
                and steps.group_caught_up(s, s.receipts.group_id, s.topics.transactions)
            ):
                how[:] = ["its successor runs, the group at the topic's end"]
                return True
            return False

        await_or_fail(committed_again, self.args.step_timeout,
                      "the restarted receipts processor to commit")  # fmt: skip
        return (
            f"pid {old.pid} killed at {sum(at_kill.values()):,} committed input offsets; {how[0]}",
            round(time.monotonic() - t_kill, 1),
        )

    def _send(self, message: OutgoingMessage) -> None:
        """One message of the stream, sent apart from it (idempotent producer)."""
        from confluent_kafka import Producer

        from pos_lambda.producer.kafka_sink import producer_config

        s = self.settings
        client = Producer(producer_config(s.bootstrap_servers, True, s.kafka.security_config)
                          | {"logger": logging.getLogger("pos.chaos.producer")})  # fmt: skip
        failed: list[Any] = []
        client.produce(
            s.topics.transactions, key=message.key, value=message.value,
            timestamp=message.timestamp_ms, on_delivery=lambda err, _m: failed.append(err),
        )  # fmt: skip
        if client.flush(120) != 0 or any(e is not None for e in failed):
            raise StepFailed(f"a held-back message was not acknowledged by Kafka: {failed}")

    def passed_hours(self) -> tuple[datetime, datetime]:
        """The stream's hours its sending has passed: a DAG run's `await_archive` waits
        for every record Kafka holds with a timestamp before the interval's end, so an
        interval that ends ahead of the stream (the records' timestamps are the
        simulated send times) waits for the stream's end. The whole interval once the
        stream is over, or while it has not passed a whole hour yet."""
        start, end = self.interval
        sent = self.sent()
        if self.stream is None or not 0 < sent < len(self.stream.messages):
            return start, end
        at = datetime.fromtimestamp(self.stream.messages[sent - 1].timestamp_ms / 1000, UTC)
        hour = at.replace(minute=0, second=0, microsecond=0)
        return (start, hour) if start < hour < end else (start, end)

    def _dag_run_recomputing(
        self, label: str
    ) -> tuple[batch_dag.Triggered, str, tuple[datetime, datetime]]:
        """A pos_batch DAG run over the hours the stream has passed, through Airflow
        (started first if it is not running), awaited until its recompute task runs."""
        self._await_master_dataset()
        if batch_dag.ensure_airflow(self.base, self.say):
            self.airflow_started = True
        start, end = self.passed_hours()
        run = batch_dag.trigger_dag(
            self.base, NAMESPACE, start, end, f"chaos-{label}-{datetime.now(UTC):%Y%m%dT%H%M%S}",
            self.say,
        )  # fmt: skip
        self.triggered.append(run)
        running: list[str] = []

        def recomputing(tasks: list[tuple[str, str, int]]) -> bool:
            running[:] = [f"try {n}" for t, st, n in tasks if t == "recompute" and st == "running"]
            return bool(running)

        if batch_dag.await_dag(self.base, run, self.say, self.args.step_timeout, recomputing):
            raise StepFailed(f"DAG run {run.run_id} ended before its recompute was seen running")
        return run, running[0], (start, end)

    def airflow_scheduler_kill(self) -> tuple[str, float]:
        """kill -9 of the scheduler's process group (its LocalExecutor workers and the
        running recompute's spark-submit with it, as when its container dies) while a
        DAG run's recompute runs; the scheduler started again, as a process manager
        would. Recovered when the DAG run succeeds: the new scheduler resets the dead
        one's task (its orphaned-task check, once the dead scheduler's heartbeat is 30 s
        old) and runs it again."""
        from pos_lambda_dev.runtime import airflow_service

        run, attempt, _ = self._dag_run_recomputing("scheduler-kill")
        scheduler = airflow_service.processes(self.base)["scheduler"]
        pid = scheduler.pid()
        if pid is None or not scheduler.kill():
            raise StepFailed("the Airflow scheduler is not managed here: cannot kill it")
        t_kill = time.monotonic()
        self.say(
            f"fault: scheduler pid {pid} killed during recompute ({attempt}); starting it again"
        )
        airflow_service.start_component(self.base, "scheduler")
        done = batch_dag.await_dag(self.base, run, self.say, self.args.step_timeout)
        assert done is not None
        tries = ", ".join(f"{t} try {n}" for t, _, n in done.tasks)
        return (f"scheduler pid {pid} killed during recompute ({attempt}); run {run.run_id} "
                f"succeeded ({tries})", round(time.monotonic() - t_kill, 1))  # fmt: skip

    def batch_beside_dag(self) -> tuple[str, float]:
        """`pos-batch run` started by hand over the same hours while a DAG run's
        recompute runs: both read the pointer, one commits first; the other must commit
        after it or be refused (exit 3, its rows left to gc), never interleave. Recovered
        when the manual run has exited and the DAG run has succeeded."""
        run, attempt, (start, end) = self._dag_run_recomputing("beside")
        t0 = time.monotonic()
        code = run_logged(
            [str(VENV_BIN / "pos-batch"), "run", "--start", start.isoformat(), "--end",
             end.isoformat()],
            self.env, self.log("batch-beside"), self.args.step_timeout, "the manual batch run",
        )  # fmt: skip
        if code not in (0, 3):
            raise StepFailed(
                f"the manual batch run beside the DAG's exited {code}; log "
                f"{self.log('batch-beside')}:\n{tail(self.log('batch-beside'))}"
            )
        done = batch_dag.await_dag(self.base, run, self.say, self.args.step_timeout)
        assert done is not None
        manual = "committed" if code == 0 else "refused (exit 3: the other run committed first)"
        tries = ", ".join(f"{t} try {n}" for t, _, n in done.tasks)
        return (f"manual run {manual}, started during the DAG's recompute ({attempt}); run "
                f"{run.run_id} succeeded ({tries})", round(time.monotonic() - t0, 1))  # fmt: skip

    def strike(self, fault: figures.Planned) -> None:
        at = self.sent()
        self.say(f"fault: {figures.LABELS[fault.kind]} at message {at:,} ...")
        t0 = time.monotonic()
        result = getattr(self, fault.kind)()
        # A fault that knows when it struck and recovered says so; else from its start.
        detail, took = result if isinstance(result, tuple) else (result, time.monotonic() - t0)
        self.outcomes.append(figures.Outcome(fault.kind, at, took, detail))
        self.say(f"fault: survived ({detail}; {took:.0f} s)")


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
            faults=FaultConfig(**FAULTS),
        )
    )  # fmt: skip
    mixed = add_conflicts(result.messages, args.conflict_rate, args.seed)
    summary = summary_with(result.summary, mixed.faults)
    summary["topic"] = s.topics.transactions
    oversized = oversized_faults(chaos, result.messages)
    summary = with_oversized(summary, oversized)
    ledger.write(args.ledger, result.receipts, [*result.faults, *mixed.faults, *oversized], summary)
    happened = [datetime.fromisoformat(r["happened_at"]) for r in result.receipts]
    first = min(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last = max(happened).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    chaos.interval = (first, last + timedelta(hours=1))
    kills = sum(1 for f in chaos.plan.faults if f.kind == "alerts_kill")
    return hold_back_conflicts(chaos, mixed.messages, kills), summary


def _natural_key(message: OutgoingMessage) -> tuple[int, int, int]:
    doc = json.loads(message.value)
    return doc["operation_id"], doc["vendor_fiscal_module"], doc["transaction_id"]


def hold_back_conflicts(
    chaos: Chaos, messages: list[OutgoingMessage], count: int
) -> list[OutgoingMessage]:
    """The stream without its first `count` conflicting copies, kept on `chaos.held` for
    the alerts kills with the number of stream messages to send before each (through its
    original, which must win). A copy sent later, after its original, with its own
    timestamp, feeds only the conflict rule: every view and alert the ledger implies
    stays the same. The first copies, so that their originals are out early."""
    at = [i for i, m in enumerate(messages) if m.kind == "conflict"][:count] if count else []
    skip = set(at)
    stream = [m for i, m in enumerate(messages) if i not in skip]
    first: dict[tuple[int, int, int], int] = {}
    for i, m in enumerate(stream):
        if m.kind == "receipt":
            first.setdefault(_natural_key(m), i)
    chaos.held = [(messages[i], first[_natural_key(messages[i])] + 1) for i in at]
    return stream


def send_held(chaos: Chaos) -> None:
    """Send the held-back copies no alerts kill took (the stream is over: their
    originals are out), so that the topic holds every message of the ledger."""
    while chaos.held:
        chaos._send(chaos.held.pop(0)[0])


def oversized_faults(chaos: Chaos, messages: list[OutgoingMessage]) -> list[dict[str, Any]]:
    """The oversized messages the `oversized_malformed` fault sends (kept on `chaos`):
    the stream's first receipt, padded, as ledger faults the auditor expects as dead
    letters with reason too_large."""
    import hashlib

    from pos_lambda.producer import malformed
    from pos_lambda.schemas.contract import Receipt, parse_message

    parsed = ((m, parse_message(m.value)) for m in messages)
    like, receipt = next((m, r) for m, r in parsed if isinstance(r, Receipt))
    faults = []
    for size in OVERSIZED_BYTES:
        kind, value, reason = malformed.oversized_message(receipt, size)
        chaos.oversized.append(OutgoingMessage(like.key, value, 0, f"malformed:{kind}"))
        faults.append({
            "kind": "malformed", "malformed_kind": kind, "expected_reason": reason,
            "value_sha256": hashlib.sha256(value).hexdigest(),
            "detail": f"{kind} message of {size:,} bytes; the validator must say {reason}",
        })  # fmt: skip
    return faults


def with_oversized(summary: dict[str, Any], faults: list[dict[str, Any]]) -> dict[str, Any]:
    """The ledger's summary counting the oversized messages too (they are in the topic)."""
    kinds = dict(summary.get("malformed_kinds", {}))
    for f in faults:
        kinds[f["malformed_kind"]] = kinds.get(f["malformed_kind"], 0) + 1
    counts = dict(summary["faults"])
    counts["malformed"] = counts.get("malformed", 0) + len(faults)
    return {**summary, "messages": summary["messages"] + len(faults), "faults": counts,
            "malformed_kinds": kinds}  # fmt: skip


def produce_in_background(chaos: Chaos, messages: list[OutgoingMessage]) -> threading.Thread:
    from confluent_kafka import Producer

    from pos_lambda.producer.kafka_sink import produce, producer_config

    # Held at each planned fault's point until the fault strikes (see `storm`).
    holds = tuple(sorted({fault_point(f, len(messages)) for f in chaos.plan.faults}))
    chaos.stream = Counting(messages, chaos.args.rate, holds)
    errors: list[BaseException] = []
    s = chaos.settings
    # librdkafka's own lines (connection refused while the broker restarts) go to the
    # log file through `logger`, not to the terminal.
    client = Producer(
        producer_config(s.bootstrap_servers, True, s.kafka.security_config)
        | {"logger": logging.getLogger("pos.chaos.producer")}
    )

    def run() -> None:
        try:
            produce(
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


def storm(chaos: Chaos, producer: threading.Thread, total: int) -> None:
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
                # The stream waits at the point (Counting's hold) until the fault
                # starts, and flows on while it strikes and recovers.
                if chaos.stream is not None:
                    chaos.stream.release(point)
                chaos.strike(fault)
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


def committed_past(before: dict[int, int], now: dict[int, int]) -> bool:
    """A group's committed offsets `now` are past `before`: none behind, one ahead."""
    return all(now.get(p, 0) >= o for p, o in before.items()) and any(
        o > before.get(p, 0) for p, o in now.items()
    )


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
    )


def _cleanup(chaos: Chaos) -> None:
    from pos_lambda_dev.runtime import cassandra_service, kafka_service

    if chaos.stream is not None:
        chaos.stream.stop.set()
    for proc in chaos.procs:
        if proc.poll() is None:
            stop_gracefully(proc, 60)
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
