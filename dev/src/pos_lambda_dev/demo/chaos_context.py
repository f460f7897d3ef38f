"""What every fault of the chaos run shares: its namespace, the stream it holds at the
faults' points, and `Chaos`, the run's context (processes kept up by a watch, logs, the
deadline, the committed offsets and the views query's commits that recoveries await).

The faults themselves are in `pos_lambda_dev.demo.faults`, one module each; the run
that strikes them is `pos_lambda_dev.demo.chaos`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import PROJECT_ROOT, Settings
from pos_lambda_dev.demo import batch_dag, steps
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    Progress,
    StepFailed,
    await_or_fail,
    env_with,
    start_logged,
)

if TYPE_CHECKING:  # figures reads the faults' names, which read this module
    from pos_lambda_dev.demo import figures

STATE = PROJECT_ROOT / ".state" / "chaos"
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


def committed_past(before: dict[int, int], now: dict[int, int]) -> bool:
    """A group's committed offsets `now` are past `before`: none behind, one ahead."""
    return all(now.get(p, 0) >= o for p, o in before.items()) and any(
        o > before.get(p, 0) for p, o in now.items()
    )


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
    """The run's context, shared by every fault: what runs, where it logs, how long is
    left, and the watch that starts again whatever exits."""

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
    prepared: str = ""  # what the fault about to strike waited for (Fault.prepare)
    # Receipts the broker lost after acknowledging them, none of their copies in the
    # input topic: [operation_id, vendor_fiscal_module, transaction_id, window_start].
    broker_lost: list[list[Any]] = field(default_factory=list)
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

    def stream_over(self) -> bool:
        """Every message of the stream sent (none: nothing to send)."""
        return self.sent() >= len(self.stream.messages if self.stream else [])

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

    def alerts_committed(self) -> dict[int, int] | None:
        s = self.settings
        with contextlib.suppress(Exception):  # a coordinator moving, the broker restarting
            return steps.committed(s, s.alerts.group_id, s.topics.transactions)
        return None

    def receipts_committed(self) -> dict[int, int] | None:
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
                    self.alerts_kills.append((time.monotonic(), self.alerts_committed()))
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

    # --- what recoveries await ------------------------------------------------------

    def last_views_commit(self) -> int:
        """The views query's last committed micro-batch (-1: none yet)."""
        commits = self.settings.checkpoint_dir / "views" / "commits"
        with contextlib.suppress(FileNotFoundError):
            return max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)
        return -1

    def await_views_commit_after(self, before: int, what: str) -> None:
        """A new micro-batch committed, or (the stream over) the query at the topic's end."""

        def working() -> bool:
            self.watch()
            return self.last_views_commit() > before or (
                self.stream_over() and steps.speed_caught_up(self.settings, ("views",))
            )

        await_or_fail(working, self.args.step_timeout, what)

    def await_master_dataset(self) -> None:
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

    def send(self, message: OutgoingMessage) -> None:
        """One message of the stream, sent apart from it (idempotent producer)."""
        from pos_lambda.adapters.kafka_clients import ConfluentClients

        s = self.settings
        client = ConfluentClients.from_settings(s).producer(
            logger=logging.getLogger("pos.chaos.producer")
        )
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
