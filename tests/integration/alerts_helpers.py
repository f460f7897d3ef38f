"""Helpers for the transactional processors' integration tests (the alerts, the
deduplicated topic): run `pos-alerts` or `pos-receipts` as a separate process, watch its
consumer group's committed offsets, and read its output back with either isolation level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from pos_lambda.adapters.service import wait_for
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import (
    FaultConfig,
    OutgoingMessage,
    SimulationConfig,
    SimulationResult,
    simulate,
)
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import kafka_service
from tests.integration.speed_helpers import VENV_BIN, env_for


def alerts_settings(settings: Settings, new_topic: Callable[..., str], **updates: Any) -> Settings:
    """Settings with fresh input and alert topics, group ids and instance id."""
    tag = uuid.uuid4().hex[:8]
    return settings.with_overrides(
        **{
            "topic_transactions": new_topic(partitions=4, prefix="alerts-in"),
            "topic_alerts": new_topic(partitions=4, prefix="alerts-out"),
            "alerts_group_id": f"pos-alerts-test-{tag}",
            "alerts_sink_group_id": f"pos-alerts-sink-test-{tag}",
            "alerts_instance_id": f"test-{tag}",
            # A restart after a kill waits at most this for the dead holder's lease.
            "alerts_lease_ttl_s": 6,
            **updates,
        }
    )


def receipts_settings(
    settings: Settings, new_topic: Callable[..., str], **updates: object
) -> Settings:
    """Settings with fresh input and output topics, group and instance id."""
    tag = new_topic(partitions=4, prefix="receipts-in")
    return settings.with_overrides(
        topic_transactions=tag,
        topic_receipts=new_topic(partitions=4, prefix="receipts-out"),
        receipts_group_id=f"pos-receipts-test-{tag[-10:]}",
        receipts_instance_id=f"test-{tag[-10:]}",
        receipts_lease_ttl_s=6,  # a restart after a kill waits at most this for the lease
        **updates,
    )


def send_in_background(settings: Settings, messages: list[OutgoingMessage]) -> threading.Thread:
    """Produce `messages` at 150/s from a thread, as terminals do while the test acts;
    the thread's `errors` hold what went wrong."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            stats = produce(messages, settings.bootstrap_servers, settings.topics.transactions,
                            rate=150, quiet=True)  # fmt: skip
            if stats.checked:  # a broker restart: what the acknowledgement check found
                print(f"input: {stats.check_line()}", file=sys.stderr, flush=True)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="input", daemon=True)
    thread.start()
    thread.errors = errors  # type: ignore[attr-defined]
    return thread


def start_processor(
    settings: Settings, log: Path, command: str = "pos-alerts", **updates: Any
) -> subprocess.Popen[bytes]:
    """`<command> run` in its own process group, with these settings (and `updates`)."""
    s = settings.with_overrides(**updates)
    out = open(log, "ab")  # noqa: SIM115 - the child keeps it; closed with the test's tmp dir
    return subprocess.Popen(
        [str(VENV_BIN / command), "run"],
        env=env_for(s),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def sigterm(proc: subprocess.Popen[bytes], timeout: float = 120) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def kill_9(proc: subprocess.Popen[bytes]) -> int:
    os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=30)


def cleanup(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)  # a frozen one must be able to die
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def is_frozen(proc: subprocess.Popen[bytes]) -> bool:
    """The process stopped itself (SIGSTOP): state T in /proc."""
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "T"
    except OSError:
        return False


def _partitions(consumer: Consumer, topic: str) -> list[TopicPartition]:
    md = consumer.list_topics(topic, timeout=30)
    return [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]


_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def committed_total(settings: Settings, group: str | None = None) -> int:
    """Sum of the processor group's (default: the alerts') committed offsets on the input
    topic (read_committed: an offset commit of an open transaction is not counted until it
    commits)."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": group or settings.alerts.group_id,  # never subscribes: does not join
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    tps: list[TopicPartition] = []

    def fetched() -> bool:
        try:
            tps[:] = consumer.committed(_partitions(consumer, settings.topics.transactions), 30)
        except KafkaException as exc:
            # A fresh or restarted broker is still electing/loading the group coordinator.
            if exc.args[0].code() in _COORDINATOR_MOVING or exc.args[0].retriable():
                return False
            raise
        return True

    try:
        assert wait_for(fetched, timeout=120, interval=0.2), "group coordinator unavailable"
        return sum(max(tp.offset, 0) for tp in tps)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return [
            consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in _partitions(consumer, topic)
        ]
    finally:
        consumer.close()


def caught_up(settings: Settings, group: str | None = None) -> bool:
    return committed_total(settings, group) == sum(
        end_offsets(settings.bootstrap_servers, settings.topics.transactions)
    )


def await_progress(
    settings: Settings, beyond: int, proc: subprocess.Popen[bytes], group: str | None = None
) -> int:
    """Wait until the group has committed more than `beyond` (the processor must live)."""
    seen = [beyond]

    def moved() -> bool:
        assert proc.poll() is None, f"processor exited with {proc.returncode}"
        seen[0] = committed_total(settings, group)
        return seen[0] > beyond

    assert wait_for(moved, timeout=180, interval=0.2), "no progress"
    return seen[0]


class Record(NamedTuple):
    key: bytes | None
    value: bytes
    partition: int
    offset: int

    @property
    def alert(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.value)
        return doc


def read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 120) -> list[Record]:
    """Every record of `topic` from the start to its end (the last stable offset with
    read_committed, the high watermark with read_uncommitted), without a group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-reader-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    records: list[Record] = []
    tps = _partitions(consumer, topic)
    consumer.assign([TopicPartition(topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
    at_end: set[int] = set()

    def drained() -> bool:
        for msg in consumer.consume(500, timeout=0.5):
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            records.append(Record(msg.key(), msg.value(), msg.partition(), msg.offset()))
        return len(at_end) == len(tps)

    try:
        assert wait_for(drained, timeout=timeout, interval=0), f"{topic} not read to its end"
    finally:
        consumer.close()
    return records


def faulty_stream(seed: int, count: int = 3000) -> SimulationResult:
    """`count` receipts of 5 stores with resends, malformed, late and out-of-order messages
    and clock skew: the input of the exactly-once tests."""
    return simulate(
        SimulationConfig(
            count=count, seed=seed, start=datetime(2026, 3, 2, 19, 30, tzinfo=UTC), stores=5,
            faults=FaultConfig(resend_rate=0.05, malformed_rate=0.02, late_rate=0.03,
                               late_max_delay_s=3600, out_of_order_rate=0.02,
                               clock_skew_max_s=30),
        )
    )  # fmt: skip


def through_faults(
    settings: Settings,
    log: Path,
    name: str,
    messages: list[OutgoingMessage],
    after_input: Callable[[], None] = lambda: None,
) -> None:
    """Run `pos-<name> run` (settings section `name`) while `messages` flow in and it is
    killed -9 three times mid-transaction (twice by its crash point, with outputs on the
    broker and the commit not yet made; once from outside) and the broker is
    hard-restarted (kill -9, start) once; `after_input()` once every message is sent.
    Returns when the last instance has caught up with the input and stopped cleanly."""
    command = f"pos-{name}"
    group = getattr(settings, name).group_id
    procs = []
    input_thread = send_in_background(settings, messages)
    try:
        # 1, 2: killed by its crash point, outputs produced and flushed, commit not made.
        for crash_at in (2, 4):
            proc = start_processor(
                settings, log, command,
                **{f"{name}_crash_point": "kill_after_produce",
                   f"{name}_crash_at_transaction": crash_at},
            )  # fmt: skip
            procs.append(proc)
            assert proc.wait(timeout=180) == -signal.SIGKILL, log.read_text()[-3000:]
        # 3: kill -9 from outside while it works through the stream.
        proc = start_processor(settings, log, command)
        procs.append(proc)
        done = await_progress(settings, committed_total(settings, group), proc, group)
        assert kill_9(proc) == -signal.SIGKILL
        # 4: the broker dies (-9) and comes back while the processor runs.
        proc = start_processor(settings, log, command)
        procs.append(proc)
        done = await_progress(settings, done, proc, group)
        assert kafka_service.process(settings).kill(), "Kafka not managed here"
        kafka_service.start(settings)
        input_thread.join(timeout=300)
        assert not input_thread.errors, input_thread.errors  # type: ignore[attr-defined]
        after_input()
        await_progress(settings, done, proc, group)  # it outlived the broker's restart

        def finished() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return caught_up(settings, group)

        assert wait_for(finished, timeout=300, interval=0.5), log.read_text()[-3000:]
        assert sigterm(proc) == 0, log.read_text()[-3000:]
    finally:
        cleanup(*procs)
