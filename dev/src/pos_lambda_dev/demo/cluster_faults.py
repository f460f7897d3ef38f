"""The faults of the replicated cluster's chaos run (`cluster_chaos`), one class each:
how it is struck, how long the node stays away, how it comes back.

A replicated cluster must keep going with one node of a kind away, not wait for it:
each fault takes one node away for `--down-seconds` while the stream flows (the run
measures the output meanwhile), then brings it back and awaits it. Which node is
decided when the fault strikes, from the cluster's own state: the broker that leads the
most input partitions, the one that coordinates the processors' transactions, the
active KRaft controller.

`java_string_hash`, `coordinator_partition` and `quorum_leader` are pure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pos_lambda.settings import Settings
from pos_lambda_dev.demo.steps import StepFailed, await_or_fail
from pos_lambda_dev.runtime import cluster, kafka_service


class ClusterRun(Protocol):
    """What a fault needs of the run (`cluster_chaos.ClusterRun`)."""

    settings: Settings  # the run's namespace, on the cluster
    base: Settings  # the cluster's own (state dir, jars)
    layout: cluster.Layout
    args: argparse.Namespace
    logs: Path
    frozen: set[int]  # pids a fault froze, resumed by the run's cleanup if it fails
    batch_commit_s: float | None

    @property
    def say(self) -> Callable[[str], None]: ...

    def hold(self, seconds: float) -> None: ...

    def views_commits(self) -> int: ...

    def start_batch(self, gate: Path, log: Path) -> subprocess.Popen[bytes]: ...


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (32-bit, signed) of a BMP string: how Kafka places a
    transactional id or a group on a partition of its internal topic."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The `__transaction_state` (or `__consumer_offsets`) partition whose leader
    coordinates `key`: Kafka's `Utils.abs(key.hashCode()) % partitions`."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions


def quorum_leader(states: list[dict[str, Any]]) -> int | None:
    """The KRaft leader from the nodes' `quorum-state` files: the leader of the highest
    epoch any node has seen (a node that missed an election holds an older one)."""
    known = [s for s in states if isinstance(s.get("leaderId"), int) and s["leaderId"] >= 0]
    if not known:
        return None
    return int(max(known, key=lambda s: s.get("leaderEpoch", -1))["leaderId"])


@dataclass(frozen=True)
class Struck:
    """What a fault did and to which node, and when its node was back."""

    node: str
    detail: str
    struck_at: float
    back_at: float
    # The speed views' micro-batches committed while the node was away, where a fault
    # counts them (the freeze: a pipeline that waits for a silent node commits none).
    views_commits_away: int | None = None


class ClusterFault(ABC):
    name: ClassVar[str]
    label: ClassVar[str]

    @abstractmethod
    def strike(self, run: ClusterRun) -> Struck:
        """Take a node away, keep it away `run.args.down_seconds`, bring it back."""


# --- Kafka ----------------------------------------------------------------------------


def _partition_leaders(run: ClusterRun, topic: str) -> dict[int, int]:
    from pos_lambda.adapters.kafka_clients import ConfluentClients

    md = ConfluentClients.from_settings(run.settings).admin().list_topics(topic, timeout=10)
    return {p: meta.leader for p, meta in md.topics[topic].partitions.items()}


def _kill_broker(run: ClusterRun, node_id: int, why: str) -> Struck:
    proc = cluster.kafka_process(run.base, node_id)
    t0 = time.monotonic()
    if not proc.kill():
        raise StepFailed(f"kafka-{node_id} ({why}) was not running")
    run.say(f"fault: kill -9 kafka-{node_id}, {why}; down for {run.args.down_seconds:.0f} s")
    run.hold(run.args.down_seconds)
    cluster.start_kafka_node(run.base, run.layout, node_id)
    back = time.monotonic()
    run.say(f"fault: kafka-{node_id} registered again {back - t0:.0f} s after the kill")
    return Struck(f"kafka-{node_id}", why, t0, back)


class KafkaLeaderKill(ClusterFault):
    name = "kafka_leader_kill"
    label = "kill -9 of the broker leading the most input partitions"

    def strike(self, run: ClusterRun) -> Struck:
        leaders = _partition_leaders(run, run.settings.topics.transactions)
        node, led = Counter(leaders.values()).most_common(1)[0]
        return _kill_broker(run, node, f"leader of {led} of {len(leaders)} input partitions")


class KafkaCoordinatorKill(ClusterFault):
    name = "kafka_coordinator_kill"
    label = "kill -9 of the alerts processor's transaction coordinator"

    def strike(self, run: ClusterRun) -> Struck:
        from pos_lambda.alerts.processor import transactional_id

        tid = transactional_id(run.settings)
        partition = coordinator_partition(tid, kafka_service.TRANSACTION_STATE_PARTITIONS)
        node = _partition_leaders(run, "__transaction_state")[partition]
        return _kill_broker(run, node, f"coordinator of {tid} (__transaction_state-{partition})")


class KafkaControllerKill(ClusterFault):
    name = "kafka_controller_kill"
    label = "kill -9 of the active KRaft controller"

    def strike(self, run: ClusterRun) -> Struck:
        states = []
        for node_id in range(1, cluster.NODES + 1):
            path = (
                cluster.root(run.base) / f"kafka-{node_id}" / "data" / "__cluster_metadata-0"
                / "quorum-state"
            )  # fmt: skip
            try:
                states.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        leader = quorum_leader(states)
        if leader is None:
            raise StepFailed("no KRaft leader in any node's quorum-state")
        return _kill_broker(run, leader, "the active controller (KRaft leader)")


# --- Cassandra ------------------------------------------------------------------------


def _cassandra_back(run: ClusterRun, node_id: int) -> None:
    cluster.start_cassandra_node(run.base, run.layout, node_id)
    cluster.await_cassandra_ring(run.base, run.layout, [run.layout.hosts[node_id - 1]])


def hint_holders(rows_by_node: dict[int, list[Any]]) -> int:
    """The nodes that hold hints for another: those whose `system_views.pending_hints`
    (one row per target node, with its count of hint files) has a row with files."""
    return sum(1 for rows in rows_by_node.values() if any(r.files for r in rows))


def _pending_hints(run: ClusterRun) -> int:
    """Nodes that still hold hints for another. Each live node answers for itself (a
    virtual table is node-local): a CQL query routed to it, not a nodetool JVM."""
    from pos_lambda.adapters.cassandra_client import open_session

    rows: dict[int, list[Any]] = {}
    for node_id in range(1, cluster.NODES + 1):
        if cluster.cassandra_process(run.base, node_id).pid() is None:
            continue
        host = run.layout.hosts[node_id - 1]
        with open_session(run.settings, keyspace=False, timeout=10, only_host=host) as session:
            rows[node_id] = list(session.execute(HINTS_QUERY))
    return hint_holders(rows)


HINTS_QUERY = "SELECT host_id, files FROM system_views.pending_hints"


class CassandraKillWhileSpeedWrites(ClusterFault):
    name = "cassandra_kill_speed"
    label = "kill -9 of a Cassandra node while the speed layer writes, back with hints"
    node_id = 2

    def strike(self, run: ClusterRun) -> Struck:
        proc = cluster.cassandra_process(run.base, self.node_id)
        before = run.views_commits()
        await_or_fail(lambda: run.views_commits() > before, 120, "a speed micro-batch")
        t0 = time.monotonic()
        proc.kill()
        run.say(f"fault: kill -9 cassandra-{self.node_id} while the speed layer writes")
        run.hold(run.args.down_seconds)
        hints = _pending_hints(run)
        _cassandra_back(run, self.node_id)
        back = time.monotonic()
        await_or_fail(lambda: _pending_hints(run) == 0, 300, "the hints to replay")
        replayed = time.monotonic() - back
        held = f"hints for it held by {hints} node(s)" if hints else "no node held hints for it"
        run.say(f"fault: cassandra-{self.node_id} back; {held}; none pending "
                f"{replayed:.0f} s later")  # fmt: skip
        return Struck(
            f"cassandra-{self.node_id}",
            f"hints held by {hints} node(s), replayed in {replayed:.0f} s",
            t0,
            back,
        )


class CassandraKillAtBatchCommit(ClusterFault):
    name = "cassandra_kill_batch_commit"
    label = "kill -9 of a Cassandra node while a batch run commits its pointer"
    node_id = 3

    def strike(self, run: ClusterRun) -> Struck:
        gate = run.logs / "batch-commit.go"
        gate.unlink(missing_ok=True)
        log = run.logs / "batch-fault.log"
        # A new log: an earlier run's "reached" line must not pass for this run's.
        log.unlink(missing_ok=True)
        batch = run.start_batch(gate, log)
        await_or_fail(
            lambda: (
                "failpoint batch.before_commit reached" in _text(log) or batch.poll() is not None
            ),
            run.args.step_timeout,
            "the batch run to reach its commit",
        )
        if batch.poll() is not None:
            raise StepFailed(f"the batch run exited {batch.returncode} before its commit; {log}")
        t0 = time.monotonic()
        cluster.cassandra_process(run.base, self.node_id).kill()
        run.say(f"fault: kill -9 cassandra-{self.node_id}; the batch run commits now")
        gate.touch()
        code = batch.wait(timeout=run.args.step_timeout)
        committed = time.monotonic() - t0
        if code != 0:
            raise StepFailed(f"the batch run exited {code} with a node down; log {log}")
        run.batch_commit_s = committed
        run.say(f"fault: the batch run committed {committed:.1f} s after the kill")
        run.hold(max(0.0, run.args.down_seconds - committed))
        _cassandra_back(run, self.node_id)
        return Struck(
            f"cassandra-{self.node_id}",
            f"pointer committed {committed:.1f} s after the kill",
            t0,
            time.monotonic(),
        )


class CassandraFreeze(ClusterFault):
    name = "cassandra_freeze"
    label = "SIGSTOP of a Cassandra node for 30 s (a gray failure), then SIGCONT"
    node_id = 1
    frozen_s = 30.0

    def strike(self, run: ClusterRun) -> Struck:
        pid = cluster.cassandra_process(run.base, self.node_id).pid()
        if pid is None:
            raise StepFailed(f"cassandra-{self.node_id} is not running")
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        run.frozen.add(pid)
        before = run.views_commits()
        run.say(f"fault: SIGSTOP cassandra-{self.node_id} for {self.frozen_s:.0f} s")
        try:
            run.hold(self.frozen_s)
            committed = run.views_commits() - before
        finally:
            os.kill(pid, signal.SIGCONT)
            run.frozen.discard(pid)
        cluster.await_cassandra_ring(run.base, run.layout, [run.layout.hosts[self.node_id - 1]])
        return Struck(
            f"cassandra-{self.node_id}",
            f"frozen, then resumed; {committed} views micro-batches committed while frozen",
            t0,
            time.monotonic(),
            views_commits_away=committed,
        )


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


# Every fault, in the order the run strikes them.
FAULTS: tuple[ClusterFault, ...] = (
    KafkaLeaderKill(),
    KafkaCoordinatorKill(),
    KafkaControllerKill(),
    CassandraKillWhileSpeedWrites(),
    CassandraKillAtBatchCommit(),
    CassandraFreeze(),
)
