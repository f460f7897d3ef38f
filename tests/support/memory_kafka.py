"""An in-memory Kafka broker behind the `KafkaClients` port
(src/pos_lambda/adapters/kafka_clients.py), with faults on demand.

`MemoryBroker` holds topics, consumer groups and transaction coordinators;
`broker.clients()` is one *process*: the clients it builds are duck-compatible with the
part of confluent-kafka's API the transactional shell uses (processor.py, restore.py),
and `clients.kill()` is its `kill -9`. What it mirrors of the real thing:

- **The log.** Every partition is a list of entries, data or control: a transaction's
  commit or abort marker occupies an offset, so a reader's position passes offsets that
  are never returned (librdkafka moves the position past them).
- **read_committed.** A consumer never returns a record of an aborted transaction and
  never reads past a partition's last stable offset (the first offset of a transaction
  still open there). `position()` is the last returned offset + 1 (or past the markers and
  aborted records it skipped), and OFFSET_INVALID after `assign()` or `seek()` until the
  next fetch, as librdkafka's app position is.
- **Transactions** (librdkafka's txnmgr): the producer's states Init, Ready,
  InTransaction, AbortableError and FatalError, with the errors each call raises in the
  wrong state (`_STATE`, or the pending abortable or fatal error). Offsets sent with
  `send_offsets_to_transaction` become the group's committed offsets when, and only when,
  the transaction commits; `committed()` waits while a transaction holds offsets of the
  partition (KIP-447's require_stable) and then times out.
- **Fencing.** `init_transactions` bumps the transactional.id's epoch and aborts the open
  transaction of the previous epoch. An older producer's next call that reaches the
  coordinator raises `_FENCED` (fatal); its produce requests are refused in the background
  (the delivery report fails, error_cb gets the fatal error) and from then on produce()
  raises `_FATAL`, *without* the fatal flag, as confluent-kafka's Producer.produce raises
  every local error (KafkaError_new0).
- **Consumer groups.** `subscribe()` then the next poll() assigns every partition of the
  topics to the newest member (static membership: a member with the same instance id
  is fenced, FENCED_INSTANCE_ID); revoke, lost and re-assign are delivered through the
  callbacks inside poll()/consume(); if a callback does not assign(), the consumer does,
  as confluent-kafka's rebalance_cb does.
- **Time.** `broker.clock` is virtual: it only moves when someone waits (an empty poll
  waits out its timeout, a backoff sleeps), so nothing here really waits.
- **Faults.** `Fault(call, nth, kind)`: the nth call (counted across every process of the
  broker, so each fault strikes once) of `role.method` (roles: `producer`, `consumer` the
  group member, `reader` the rebuild's consumer; `producer.delivery` counts produced
  records) does what `kind` says. A `Crash` (or `Hang`: a call that never returns, which
  the watchdog answers with an in-place restart) kills the process: every later call of
  its clients raises Crash again, it writes nothing more, and its open transaction stays
  open until a new producer with the same transactional.id calls init_transactions.

- **Growth.** `grow(topic, count)` adds partitions, as `kafka-topics --alter` does: the
  group's member rebalances at its next poll (revoke, then assign every partition).
  Offset commits keep their metadata (`TopicPartition.metadata`), as the broker does.

Not modelled: the broker's own transaction timeout, replication, leader changes,
quotas, more than one live member per group.
"""

from __future__ import annotations

import time as _time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, SupportsIndex

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from pos_lambda.adapters.kafka_clients import (
    KafkaClients,
    KafkaConsumer,
    KafkaMessage,
    KafkaProducer,
)

TP = tuple[str, int]
DeliveryCallback = Callable[[KafkaError | None, "Message"], None]

# --- fault kinds ---------------------------------------------------------------------
RETRIABLE = "retriable"  # a retriable error (coordinator moving); nothing happened
TIMED_OUT = "timed_out"  # _TIMED_OUT: the operation went on, "retry call to resume"
ABORTABLE = "abortable"  # txn_requires_abort: the transaction must be aborted
FATAL = "fatal"  # a fatal error: the client is unusable
FENCED = "fenced"  # a newer producer with this transactional.id initialised just before
CRASH = "crash"  # the process dies before the call takes effect
CRASH_AFTER = "crash_after"  # ... right after it took effect
HANG = "hang"  # the call never returns: the watchdog restarts the process in place
QUEUE_FULL = "queue_full"  # produce() raises BufferError (local queue full)
REVOKE = "revoke"  # a rebalance takes the partitions away (poll/consume)
LOST = "lost"  # the group moved on without this member (poll/consume)
DELIVERY_FAILED = "delivery_failed"  # a produced record fails at once (e.g. too large)
DELIVERY_TIMED_OUT = "delivery_timed_out"  # ... fails when the commit flushes it

# Which faults each call can meet (what the property tests draw from).
_TXN_CALL = (RETRIABLE, TIMED_OUT, ABORTABLE, FATAL, FENCED, CRASH, CRASH_AFTER, HANG)
FAULTS_AT: dict[str, tuple[str, ...]] = {
    "producer.init_transactions": (RETRIABLE, TIMED_OUT, FATAL, CRASH, CRASH_AFTER, HANG),
    "producer.begin_transaction": (CRASH,),
    "producer.produce": (QUEUE_FULL, FENCED, CRASH, CRASH_AFTER),
    "producer.delivery": (DELIVERY_FAILED, DELIVERY_TIMED_OUT),
    "producer.send_offsets_to_transaction": _TXN_CALL,
    "producer.commit_transaction": _TXN_CALL,
    "producer.abort_transaction": (RETRIABLE, TIMED_OUT, FATAL, FENCED, CRASH, HANG),
    "consumer.poll": (REVOKE, LOST, RETRIABLE, FATAL, CRASH),
    "consumer.consume": (REVOKE, LOST, CRASH),
    "consumer.committed": (TIMED_OUT, CRASH),
    "consumer.position": (CRASH,),
    "consumer.seek": (CRASH,),
    "reader.consume": (RETRIABLE, CRASH),
    "reader.get_watermark_offsets": (TIMED_OUT, CRASH),
}
# The calls whose effect goes on after a timeout: calling them again resumes (librdkafka).
_RESUMABLE = {"init_transactions", "send_offsets_to_transaction", "commit_transaction",
              "abort_transaction"}  # fmt: skip


class Crash(BaseException):
    """The process died (kill -9): nothing of it runs or writes any more."""


class Hang(Crash):
    """A call that never returns. The shell's watchdog restarts the process in place
    (os.execv): to Kafka, exactly a kill -9 followed by a restart."""


@dataclass(frozen=True)
class Fault:
    """At the `nth` call of `call` ("producer.commit_transaction"), do `kind`."""

    call: str
    nth: int
    kind: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.call} #{self.nth}"


class Faults:
    """The schedule: counts every call by name, hands out each fault once."""

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self.pending = list(faults)
        self.fired: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.armed = True

    def at(self, call: str) -> Fault | None:
        self.calls[call] += 1
        if not self.armed:
            return None
        for fault in self.pending:
            if fault.call == call and fault.nth == self.calls[call]:
                self.pending.remove(fault)
                self.fired.append(fault)
                return fault
        return None


class VirtualClock:
    """Stands in for the `time` module: only moves when something waits."""

    EPOCH_S = 1_772_438_400.0  # record timestamps start at 2026-03-02T08:00:00Z

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.EPOCH_S + self.now

    def sleep(self, seconds: float | SupportsIndex) -> None:
        self.now += max(0.0, float(seconds))

    def __getattr__(self, name: str) -> Any:  # the rest of the time module
        return getattr(_time, name)


def error(
    code: int, reason: str, *, fatal: bool = False, retriable: bool = False, abortable: bool = False
) -> KafkaError:
    return KafkaError(code, reason, fatal=fatal, retriable=retriable, txn_requires_abort=abortable)


# --- the log -------------------------------------------------------------------------


@dataclass(eq=False)
class Txn:
    """One transaction of one producer epoch, as its coordinator knows it."""

    transactional_id: str
    epoch: int
    state: str = "open"  # "committed", "aborted"
    first_offsets: dict[TP, int] = field(default_factory=dict)
    offsets: dict[str, dict[TP, int]] = field(default_factory=dict)  # group -> offsets
    metadata: dict[str, dict[TP, str | None]] = field(default_factory=dict)  # ... their metadata


@dataclass(eq=False)
class Entry:
    """One offset of a partition: a record, or a transaction's control marker."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] | None
    timestamp_ms: int
    txn: Txn | None = None
    marker: str | None = None  # "commit" / "abort"

    @property
    def readable(self) -> bool:
        """A record read_committed returns (once below the last stable offset)."""
        return self.marker is None and (self.txn is None or self.txn.state == "committed")


class Message:
    """confluent_kafka.Message's read side."""

    def __init__(
        self, topic: str, partition: int, offset: int, entry: Entry | None = None,
        err: KafkaError | None = None,
    ) -> None:  # fmt: skip
        self._topic, self._partition, self._offset = topic, partition, offset
        self._entry, self._error = entry, err

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_CREATE_TIME, self._entry.timestamp_ms if self._entry else -1)

    def key(self) -> bytes | None:
        return self._entry.key if self._entry else None

    def value(self) -> bytes | None:
        return self._entry.value if self._entry else None

    def headers(self) -> list[tuple[str, str | bytes | None]] | None:
        return self._entry.headers if self._entry else None

    def __repr__(self) -> str:
        return f"Message({self._topic}[{self._partition}]@{self._offset}, error={self._error})"


@dataclass
class Group:
    committed: dict[TP, int] = field(default_factory=dict)
    metadata: dict[TP, str | None] = field(default_factory=dict)  # of each committed offset
    generation: int = 0
    member: MemoryConsumer | None = None


@dataclass(frozen=True)
class GroupMetadata:
    """consumer_group_metadata(): what KIP-447 checks a transactional offset commit by."""

    group_id: str
    generation: int


class MemoryBroker:
    """Topics, consumer groups and transaction coordinators of one in-memory cluster."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self.clock = VirtualClock()
        self.faults = Faults()
        self.logs: dict[str, list[list[Entry]]] = {}
        self.groups: dict[str, Group] = {}
        self.epochs: dict[str, int] = {}  # transactional.id -> current producer epoch
        self.open_txns: dict[str, Txn] = {}  # transactional.id -> its open transaction
        # Called after every offset commit (transactional or not) with (group, offsets).
        self.on_commit: list[Callable[[str, dict[TP, int]], None]] = []
        self.processes = 0
        for name, partitions in (topics or {}).items():
            self.create_topic(name, partitions)

    def arm(self, faults: Iterable[Fault]) -> None:
        """Start the fault schedule now (calls made before do not count)."""
        self.faults = Faults(faults)

    def clients(self, name: str | None = None) -> MemoryClients:
        """The Kafka clients of one new process."""
        self.processes += 1
        return MemoryClients(self, name or f"process-{self.processes}")

    # --- topics and the log ----------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.logs.setdefault(name, [[] for _ in range(partitions)])

    def grow(self, topic: str, count: int) -> None:
        """More partitions (never fewer, as Kafka); the group members rebalance."""
        self.create_topic(topic)
        assert count >= len(self.logs[topic]), "Kafka cannot shrink a topic"
        self.logs[topic].extend([] for _ in range(count - len(self.logs[topic])))
        for group in self.groups.values():
            member = group.member
            if member is not None and not member.closed and topic in member.topics:
                member.events.append("revoke")

    def partitions(self, topic: str) -> int:
        self.create_topic(topic)  # auto.create.topics.enable
        return len(self.logs[topic])

    def log(self, topic: str, partition: int) -> list[Entry]:
        self.create_topic(topic)
        return self.logs[topic][partition]

    def append(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, str | bytes | None]] | None = None,
        txn: Txn | None = None,
        marker: str | None = None,
    ) -> Entry:
        log = self.log(topic, partition)
        entry = Entry(
            len(log), key, value, list(headers) if headers else None,
            int(self.clock.time() * 1000), txn, marker,
        )  # fmt: skip
        log.append(entry)
        if txn is not None and marker is None:
            txn.first_offsets.setdefault((topic, partition), entry.offset)
        return entry

    def end_offset(self, topic: str, partition: int) -> int:
        return len(self.log(topic, partition))

    def stable_offset(self, topic: str, partition: int) -> int:
        """The last stable offset: read_committed readers stop there."""
        firsts = [
            t.first_offsets[(topic, partition)]
            for t in self.open_txns.values()
            if (topic, partition) in t.first_offsets
        ]
        return min(firsts, default=self.end_offset(topic, partition))

    def read_committed(self, topic: str, partition: int | None = None) -> list[Message]:
        """What a read_committed reader gets from the start, partition by partition."""
        parts = range(self.partitions(topic)) if partition is None else [partition]
        return [
            Message(topic, p, e.offset, e)
            for p in parts
            for e in self.log(topic, p)[: self.stable_offset(topic, p)]
            if e.readable
        ]

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        offsets = self.groups.get(group, Group()).committed
        return {p: o for (t, p), o in offsets.items() if t == topic}

    # --- transaction coordinator -----------------------------------------------------

    def init_producer(self, transactional_id: str) -> int:
        """InitProducerId: a new epoch; the previous epoch's open transaction is aborted."""
        open_txn = self.open_txns.get(transactional_id)
        if open_txn is not None:
            self.end_txn(open_txn, commit=False)
        self.epochs[transactional_id] = self.epochs.get(transactional_id, -1) + 1
        return self.epochs[transactional_id]

    def fence(self, transactional_id: str) -> None:
        """What a newer instance's init_transactions does to this id's current producer."""
        self.init_producer(transactional_id)

    def txn_of(self, transactional_id: str, epoch: int) -> Txn:
        txn = self.open_txns.get(transactional_id)
        if txn is None:
            txn = self.open_txns[transactional_id] = Txn(transactional_id, epoch)
        return txn

    def end_txn(self, txn: Txn, commit: bool) -> None:
        """EndTxn: a marker in every partition written, then the offsets (commit only)."""
        if self.open_txns.get(txn.transactional_id) is not txn:
            return  # ended already (aborted by a newer epoch's init_transactions)
        kind = "commit" if commit else "abort"
        for topic, partition in txn.first_offsets:
            self.append(topic, partition, None, txn=txn, marker=kind)
        txn.state = "committed" if commit else "aborted"
        del self.open_txns[txn.transactional_id]
        if commit:
            for group, offsets in txn.offsets.items():
                self.commit_offsets(group, offsets, txn.metadata.get(group))

    def commit_offsets(
        self, group: str, offsets: Mapping[TP, int], metadata: Mapping[TP, str | None] | None = None
    ) -> None:
        record = self.groups.setdefault(group, Group())
        record.committed.update(offsets)
        record.metadata.update({tp: (metadata or {}).get(tp) for tp in offsets})
        for hook in self.on_commit:
            hook(group, dict(offsets))

    def unstable(self, group: str, tp: TP) -> bool:
        """A transaction still open holds offsets of this partition (KIP-447)."""
        return any(tp in t.offsets.get(group, {}) for t in self.open_txns.values())


class MemoryClients:
    """The `KafkaClients` port of one process of a `MemoryBroker`."""

    def __init__(self, broker: MemoryBroker, name: str) -> None:
        self.broker, self.name = broker, name
        self.alive = True

    def kill(self) -> None:
        """kill -9: every later call of this process's clients raises Crash."""
        self.alive = False

    def check(self) -> None:
        if not self.alive:
            raise Crash(f"{self.name} is dead")

    def group_consumer(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> MemoryConsumer:
        self.check()
        return MemoryConsumer(self, "consumer", group_id, instance_id, partition_eof)

    def reader(self) -> MemoryConsumer:
        self.check()
        return MemoryConsumer(self, "reader", None, None, partition_eof=True)

    def group_offsets_reader(self, group_id: str) -> MemoryConsumer:
        self.check()
        reader = MemoryConsumer(self, "offsets_reader", group_id, None, partition_eof=False)
        reader.require_stable = False
        return reader

    def producer(
        self, *, idempotence: bool = True, error_cb: Callable[[KafkaError], None] | None = None
    ) -> MemoryProducer:
        self.check()
        return MemoryProducer(self, None, error_cb)

    def transactional_producer(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        error_cb: Callable[[KafkaError], None] | None = None,
    ) -> MemoryProducer:
        self.check()
        return MemoryProducer(self, transactional_id, error_cb)


class _Client:
    """What every client does on every call: die with its process, meet its faults."""

    role = ""

    def __init__(self, clients: MemoryClients) -> None:
        self.clients, self.broker = clients, clients.broker
        self.closed = False

    def _enter(self, method: str) -> Fault | None:
        self.clients.check()
        if self.closed:
            raise RuntimeError(f"{self.role} closed")
        fault = self.broker.faults.at(f"{self.role}.{method}")
        if fault is not None and fault.kind in (CRASH, HANG):
            self.clients.kill()
            raise (Hang if fault.kind == HANG else Crash)(str(fault))
        return fault

    def _after(self, fault: Fault | None) -> None:
        """A fault that strikes once the call took effect."""
        if fault is not None and fault.kind == CRASH_AFTER:
            self.clients.kill()
            raise Crash(str(fault))


# --- consumers -----------------------------------------------------------------------


@dataclass
class _Fetch:
    start: int  # an offset, or OFFSET_BEGINNING / OFFSET_END / OFFSET_INVALID (committed)
    next: int | None = None  # the next offset to fetch, once resolved
    app: int = OFFSET_INVALID  # position(): the last offset returned or skipped + 1
    eof_at: int = OFFSET_INVALID  # where _PARTITION_EOF was last reported


class MemoryConsumer(_Client):
    """A read_committed consumer: a group member (`consumer`) or a reader (`reader`)."""

    def __init__(
        self,
        clients: MemoryClients,
        role: str,
        group_id: str | None,
        instance_id: str | None,
        partition_eof: bool,
    ) -> None:
        super().__init__(clients)
        self.role, self.group_id, self.instance_id = role, group_id, instance_id
        self.partition_eof = partition_eof
        self.fetches: dict[TP, _Fetch] = {}
        self.topics: list[str] = []
        self.callbacks: dict[str, Callable[[Any, list[TopicPartition]], None] | None] = {}
        self.generation = -1
        self.events: deque[str] = deque()  # rebalance events to deliver in poll()
        self.fenced_out = False
        self.assigned_in_callback = False
        self.polls = 0  # poll() and consume() calls
        self.require_stable = True  # committed() waits for open transactions (KIP-447)
        self.empty_polls = 0  # ... in a row that returned nothing

    @property
    def group(self) -> Group:
        assert self.group_id is not None, "a reader has no group"
        return self.broker.groups.setdefault(self.group_id, Group())

    # --- group membership ------------------------------------------------------------

    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[[Any, list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[Any, list[TopicPartition]], None] | None = None,
        on_lost: Callable[[Any, list[TopicPartition]], None] | None = None,
    ) -> None:
        self._enter("subscribe")
        self.topics = list(topics)
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        previous = self.group.member
        if previous is not None and previous is not self and not previous.closed:
            if self.instance_id is not None and previous.instance_id == self.instance_id:
                previous.fenced_out = True  # KIP-345: the newer static member wins
            else:
                previous.events.append("evicted")  # every partition moves to the newest
        self.group.member = self
        self.group.generation += 1
        self.generation = self.group.generation
        self.events.append("assign")

    def _rebalance(self) -> None:
        """Deliver the pending rebalance events, as librdkafka does inside poll()."""
        while self.events:
            event = self.events.popleft()
            if event == "assign":
                parts = [
                    TopicPartition(topic, p)
                    for topic in self.topics
                    for p in range(self.broker.partitions(topic))
                ]
                self.assigned_in_callback = False
                on_assign = self.callbacks.get("assign")
                if on_assign is not None:
                    on_assign(self, parts)
                if not self.assigned_in_callback:
                    self._assign(parts)
                continue
            parts = self._assignment()
            callback = self.callbacks.get("revoke")
            if event == "lost":
                self.group.generation += 1  # the group moved on before this member heard
                callback = self.callbacks.get("lost") or callback
            if callback is not None and parts:
                callback(self, parts)
            self.fetches.clear()  # unassign, if the callback did not
            if event != "lost":
                self.group.generation += 1  # the rebalance completes after the revocation
            self.generation = self.group.generation
            if event != "evicted":  # rejoin: the new assignment comes with a later poll
                self.events.append("assign")
            return

    # --- fetching --------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        batch = self._fetch("poll", 1, timeout)
        return batch[0] if batch else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        return self._fetch("consume", num_messages, timeout)

    def _fetch(self, method: str, limit: int, timeout: float | None) -> list[Message]:
        fault = self._enter(method)
        self.polls += 1
        if fault is not None and fault.kind in (REVOKE, LOST):
            self.events.appendleft(fault.kind)
        self._rebalance()
        if fault is not None and fault.kind in (RETRIABLE, FATAL):
            code = KafkaError._TRANSPORT if fault.kind == RETRIABLE else KafkaError._FATAL
            err = error(
                code, f"injected: {fault}", fatal=fault.kind == FATAL,
                retriable=fault.kind == RETRIABLE,
            )  # fmt: skip
            return [Message(self.topics[0] if self.topics else "", -1, OFFSET_INVALID, err=err)]
        if self.fenced_out:
            err = error(
                KafkaError.FENCED_INSTANCE_ID,
                "Fatal consumer error: a newer member with the same group.instance.id",
                fatal=True,
            )
            return [Message("", -1, OFFSET_INVALID, err=err)]
        out: list[Message] = []
        while len(out) < limit:
            msg = self._next()
            if msg is None:
                break
            out.append(msg)
        if out:
            self.empty_polls = 0
        else:
            self.empty_polls += 1
            self.broker.clock.sleep(timeout if timeout is not None and timeout > 0 else 0.0)
        self.broker.clock.sleep(1e-6)  # a call takes time: a deadline is always passed
        return out

    def _next(self) -> Message | None:
        """The next record of the assigned partitions, round-robin, read_committed."""
        for (topic, partition), fetch in list(self.fetches.items()):
            if fetch.next is None:
                fetch.next = self._resolve(topic, partition, fetch.start)
            log = self.broker.log(topic, partition)
            stable = self.broker.stable_offset(topic, partition)
            while fetch.next < stable:
                entry = log[fetch.next]
                fetch.next += 1
                fetch.app = fetch.next  # past markers and aborted records too
                if entry.readable:
                    # Rotate: the next call starts with the next partition.
                    self.fetches[(topic, partition)] = self.fetches.pop((topic, partition))
                    return Message(topic, partition, entry.offset, entry)
            if self.partition_eof and fetch.eof_at != fetch.next:
                fetch.eof_at = fetch.next
                err = error(
                    KafkaError._PARTITION_EOF,
                    f"Fetch reached end of partition at offset {fetch.next}",
                )
                return Message(topic, partition, fetch.next, err=err)
        return None

    def _resolve(self, topic: str, partition: int, start: int) -> int:
        if start == OFFSET_BEGINNING:
            return 0
        if start == OFFSET_END:
            return self.broker.end_offset(topic, partition)
        if start >= 0:
            return start
        committed = self.group.committed.get((topic, partition)) if self.group_id else None
        return committed if committed is not None else 0  # auto.offset.reset=earliest

    # --- positions and offsets -------------------------------------------------------

    def _assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.fetches]

    def assignment(self) -> list[TopicPartition]:
        self._enter("assignment")
        return self._assignment()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._enter("assign")
        self._assign(partitions)

    def _assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned_in_callback = True
        self.fetches = {(tp.topic, tp.partition): _Fetch(tp.offset) for tp in partitions}

    def unassign(self) -> None:
        self._enter("unassign")
        self.fetches.clear()

    def seek(self, partition: TopicPartition) -> None:
        self._enter("seek")
        key = (partition.topic, partition.partition)
        if key not in self.fetches:
            raise KafkaException(error(KafkaError._STATE, "Partition is not assigned"))
        self.fetches[key] = _Fetch(partition.offset)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._enter("position")
        return [
            TopicPartition(
                tp.topic,
                tp.partition,
                f.app if (f := self.fetches.get((tp.topic, tp.partition))) else OFFSET_INVALID,
            )
            for tp in partitions
        ]

    def committed(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        fault = self._enter("committed")
        if (fault is not None and fault.kind in (TIMED_OUT, RETRIABLE)) or (
            self.require_stable
            and any(
                self.broker.unstable(self.group_id or "", (tp.topic, tp.partition))
                for tp in partitions
            )
        ):
            # librdkafka retries UNSTABLE_OFFSET_COMMIT until the call's timeout.
            self.broker.clock.sleep(timeout or 0.0)
            raise KafkaException(error(KafkaError._TIMED_OUT, "Local: Timed out", retriable=True))
        return [
            _partition(
                tp.topic,
                tp.partition,
                self.group.committed.get((tp.topic, tp.partition), OFFSET_INVALID),
                self.group.metadata.get((tp.topic, tp.partition)),
            )
            for tp in partitions
        ]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """ClusterMetadata's shape, as far as the shell reads it. TIMED_OUT: a broker that
        does not answer (restarting); RETRIABLE: it answers, the topic without leaders."""
        fault = self._enter("list_topics")
        if fault is not None and fault.kind == TIMED_OUT:
            self.broker.clock.sleep(timeout if timeout > 0 else 0.0)
            raise KafkaException(error(KafkaError._TIMED_OUT, "Local: Timed out"))
        leaderless = fault is not None and fault.kind == RETRIABLE
        names = [topic] if topic is not None else list(self.broker.logs)
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(
                    error=error(KafkaError.LEADER_NOT_AVAILABLE, "Broker: Leader not available")
                    if leaderless
                    else None,
                    partitions={p: None for p in range(self.broker.partitions(name))},
                )
                for name in names
            }
        )

    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """A plain (non-transactional) offset commit: the at-least-once mode."""
        fault = self._enter("commit")
        if fault is not None and fault.kind in (RETRIABLE, TIMED_OUT):
            raise KafkaException(error(KafkaError._TIMED_OUT, "Local: Timed out", retriable=True))
        if offsets is None:
            offsets = [tp for tp in self.position(self._assignment()) if tp.offset >= 0]
        if self.group.member is not self or self.generation != self.group.generation:
            raise KafkaException(
                error(KafkaError.ILLEGAL_GENERATION, "Broker: the group rebalanced since")
            )
        self.broker.commit_offsets(
            self.group_id or "",
            {(tp.topic, tp.partition): tp.offset for tp in offsets},
            {(tp.topic, tp.partition): tp.metadata for tp in offsets},
        )
        return None if asynchronous else offsets

    def consumer_group_metadata(self) -> GroupMetadata:
        self._enter("consumer_group_metadata")
        return GroupMetadata(self.group_id or "", self.generation)

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        fault = self._enter("get_watermark_offsets")
        if fault is not None and fault.kind in (TIMED_OUT, RETRIABLE):
            self.broker.clock.sleep(timeout or 0.0)
            raise KafkaException(error(KafkaError._TIMED_OUT, "Local: Timed out", retriable=True))
        return 0, self.broker.end_offset(partition.topic, partition.partition)

    def close(self) -> None:
        self._enter("close")
        self.closed = True
        self.fetches.clear()


def _partition(topic: str, partition: int, offset: int, metadata: str | None) -> TopicPartition:
    """A TopicPartition as committed() returns it (confluent-kafka refuses metadata=None)."""
    if metadata is None:
        return TopicPartition(topic, partition, offset)
    return TopicPartition(topic, partition, offset, metadata=metadata)


# --- producers -----------------------------------------------------------------------

_FENCED_TEXT = "Producer fenced by newer instance: Broker: Producer attempted an old epoch"
_RESUME_TEXT = "Timed out waiting for operation to finish, retry call to resume"

_STATE_NAMES = {"init": "Init", "ready": "Ready", "in_transaction": "InTransaction",
                "abortable": "AbortableError", "fatal": "FatalError"}  # fmt: skip


class MemoryProducer(_Client):
    """An idempotent producer; with a transactional.id, librdkafka's transaction manager."""

    role = "producer"

    def __init__(
        self,
        clients: MemoryClients,
        transactional_id: str | None,
        error_cb: Callable[[KafkaError], None] | None,
    ) -> None:
        super().__init__(clients)
        self.transactional_id, self.error_cb = transactional_id, error_cb
        self.state = "init" if transactional_id else "ready"
        self.epoch = -1
        self.txn: Txn | None = None  # the coordinator's side of the open transaction
        self.error: KafkaError | None = None  # the pending abortable or fatal error
        self.resume: str | None = None  # a timed-out call that went on: call it again
        self.reports: deque[tuple[DeliveryCallback | None, KafkaError | None, Message]] = deque()
        self.unflushed_failures: list[tuple[DeliveryCallback | None, Message]] = []
        self.events: deque[KafkaError] = deque()  # for error_cb

    # --- states ----------------------------------------------------------------------

    def _require(self, *states: str) -> None:
        """librdkafka's rd_kafka_txn_require_state: the pending error, or _STATE."""
        if self.state == "fatal" and self.error is not None:
            raise KafkaException(self.error)
        if self.state == "abortable" and "abortable" not in states and self.error is not None:
            raise KafkaException(self.error)
        if self.state not in states:
            raise KafkaException(
                error(KafkaError._STATE, f"Operation not valid in state {_STATE_NAMES[self.state]}")
            )

    def _fail(self, err: KafkaError) -> KafkaException:
        """Enter the error's state (fatal, or abortable inside a transaction)."""
        if err.fatal():
            self.state, self.error = "fatal", err
            self.events.append(err)
        elif err.txn_requires_abort() and self.state == "in_transaction":
            self.state, self.error = "abortable", err
        return KafkaException(err)

    def _check_epoch(self) -> None:
        """A request to the coordinator with a stale epoch: fenced (PRODUCER_FENCED)."""
        assert self.transactional_id is not None
        if self.broker.epochs.get(self.transactional_id) != self.epoch:
            raise self._fail(error(KafkaError._FENCED, _FENCED_TEXT, fatal=True))

    def _before(self, fault: Fault | None, method: str) -> bool:
        """Raise what a fault raises before the call takes effect; True: a resumed call
        that already took effect (it returns at once)."""
        if self.resume == method:
            self.resume = None
            return True
        if fault is None:
            return False
        if fault.kind == FENCED and self.transactional_id is not None:
            self.broker.fence(self.transactional_id)
        elif fault.kind == RETRIABLE or (fault.kind == TIMED_OUT and method not in _RESUMABLE):
            code = KafkaError.COORDINATOR_NOT_AVAILABLE
            raise KafkaException(error(code, f"injected {fault}", retriable=True))
        elif fault.kind == ABORTABLE:
            self._require("in_transaction")
            code = KafkaError.TRANSACTION_ABORTABLE
            raise self._fail(error(code, f"injected {fault}", abortable=True))
        elif fault.kind == FATAL:
            code = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            raise self._fail(error(code, f"injected {fault}", fatal=True))
        return False

    def _after(self, fault: Fault | None, method: str = "") -> None:
        super()._after(fault)
        if fault is not None and fault.kind == TIMED_OUT and method in _RESUMABLE:
            self.resume = method
            raise KafkaException(error(KafkaError._TIMED_OUT, _RESUME_TEXT, retriable=True))

    # --- transactions ----------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        fault = self._enter("init_transactions")
        if self._before(fault, "init_transactions"):
            return
        self._require("init")
        assert self.transactional_id is not None
        self.epoch = self.broker.init_producer(self.transactional_id)
        self.state = "ready"
        self._after(fault, "init_transactions")

    def begin_transaction(self) -> None:
        fault = self._enter("begin_transaction")
        self._before(fault, "begin_transaction")
        self._require("ready")
        self.state, self.txn = "in_transaction", None
        self._after(fault)

    def _open_txn(self) -> Txn:
        assert self.transactional_id is not None
        if self.txn is None:
            self.txn = self.broker.txn_of(self.transactional_id, self.epoch)
        return self.txn

    def send_offsets_to_transaction(
        self,
        positions: list[TopicPartition],
        group_metadata: GroupMetadata,
        timeout: float | None = None,
    ) -> None:
        fault = self._enter("send_offsets_to_transaction")
        if self._before(fault, "send_offsets_to_transaction"):
            return
        self._require("in_transaction")
        self._check_epoch()
        group = self.broker.groups.get(group_metadata.group_id, Group())
        # A consumer outside the group (generation -1) may commit; a member only with its
        # current generation.
        if 0 <= group_metadata.generation != group.generation:
            code, text = KafkaError.ILLEGAL_GENERATION, "the group rebalanced since"
            raise self._fail(error(code, text, abortable=True))
        txn = self._open_txn()
        offsets = txn.offsets.setdefault(group_metadata.group_id, {})
        offsets.update({(tp.topic, tp.partition): tp.offset for tp in positions})
        metadata = txn.metadata.setdefault(group_metadata.group_id, {})
        metadata.update({(tp.topic, tp.partition): tp.metadata for tp in positions})
        self._after(fault, "send_offsets_to_transaction")

    def commit_transaction(self, timeout: float | None = None) -> None:
        fault = self._enter("commit_transaction")
        if self._before(fault, "commit_transaction"):
            return
        self._require("in_transaction")
        if self.unflushed_failures:  # the commit's flush finds records that failed
            for callback, msg in self.unflushed_failures:
                self.reports.append((callback, msg.error(), msg))
            self.unflushed_failures.clear()
            self._serve()
            code, text = KafkaError._MSG_TIMED_OUT, "Failed to flush all outstanding messages"
            raise self._fail(error(code, text, abortable=True))
        self._check_epoch()
        if self.txn is not None:
            self.broker.end_txn(self.txn, commit=True)
        self.state, self.txn = "ready", None
        self._serve()
        self._after(fault, "commit_transaction")

    def abort_transaction(self, timeout: float | None = None) -> None:
        fault = self._enter("abort_transaction")
        if self._before(fault, "abort_transaction"):
            return
        self._require("in_transaction", "abortable")
        self.unflushed_failures.clear()  # purged
        self._check_epoch()
        if self.txn is not None:
            self.broker.end_txn(self.txn, commit=False)
        self.state, self.txn, self.error = "ready", None, None
        self._serve()
        self._after(fault, "abort_transaction")

    # --- producing -------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        fault = self._enter("produce")
        if fault is not None and fault.kind == QUEUE_FULL:
            raise BufferError("Local: Queue full")
        if fault is not None and fault.kind == FENCED and self.transactional_id is not None:
            self.broker.fence(self.transactional_id)
        if self.state == "fatal":  # rd_kafka_check_produce; confluent-kafka drops the flag
            raise KafkaException(
                error(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")
            )
        if self.transactional_id is not None and self.state != "in_transaction":
            raise KafkaException(
                error(KafkaError._STATE, "Unable to produce message: Local: Erroneous state")
            )
        callback = on_delivery or callback
        if partition < 0:
            partition = zlib.crc32(key or b"") % self.broker.partitions(topic)
        delivery = self.broker.faults.at("producer.delivery")
        failed = Message(topic, partition, OFFSET_INVALID)
        if self.transactional_id is not None and (
            self.broker.epochs.get(self.transactional_id) != self.epoch
        ):  # the broker refuses the batch: fatal, found in the background
            err = error(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)
            self.reports.append((callback, err, failed))
            self._fail(err)
        elif delivery is not None and delivery.kind == DELIVERY_FAILED:
            err = error(KafkaError.MSG_SIZE_TOO_LARGE, f"injected {delivery}", abortable=True)
            self.reports.append((callback, err, failed))
            self._fail(err)  # abortable at once: produce() raises _STATE from now on
        elif delivery is not None and delivery.kind == DELIVERY_TIMED_OUT:
            err = error(KafkaError._MSG_TIMED_OUT, f"injected {delivery}: Local: Message timed out")
            self.unflushed_failures.append(
                (callback, Message(topic, partition, OFFSET_INVALID, err=err))
            )
        else:
            txn = self._open_txn() if self.transactional_id is not None else None
            entry = self.broker.append(topic, partition, value, key, headers, txn)
            self.reports.append((callback, None, Message(topic, partition, entry.offset, entry)))
        self._after(fault)

    def _serve(self) -> int:
        """Serve delivery reports and error events (poll, flush, the transaction calls)."""
        served = 0
        while self.reports:
            callback, err, msg = self.reports.popleft()
            if callback is not None:
                callback(err, msg)
            served += 1
        while self.events:
            err = self.events.popleft()
            if self.error_cb is not None:
                self.error_cb(err)
            served += 1
        return served

    def poll(self, timeout: float | None = None) -> int:
        self._enter("poll")
        served = self._serve()
        if not served:
            self.broker.clock.sleep(timeout or 0.0)
        return served

    def flush(self, timeout: float | None = None) -> int:
        fault = self._enter("flush")
        for callback, msg in self.unflushed_failures:
            self.reports.append((callback, msg.error(), msg))
            if self.state == "in_transaction":
                self._fail(error(KafkaError._MSG_TIMED_OUT, str(msg.error()), abortable=True))
        self.unflushed_failures.clear()
        self._serve()
        self._after(fault)
        return 0

    def __len__(self) -> int:
        return len(self.reports) + len(self.unflushed_failures)


# mypy holds the fake to the port's Protocols here (`make check`): a call the project
# makes that the fake lacks, or answers with another type, is a type error.
def _satisfies_the_port(broker: MemoryBroker) -> KafkaClients:
    return broker.clients()


def _consumer_satisfies_the_port(consumer: MemoryConsumer) -> KafkaConsumer:
    return consumer


def _producer_satisfies_the_port(producer: MemoryProducer) -> KafkaProducer:
    return producer


def _message_satisfies_the_port(message: Message) -> KafkaMessage:
    return message
