"""The transactional read-process-write shell: records from an input topic, through a
pure step (src/pos_lambda/transactional/step.py), into an output topic, exactly once. Its users:

    pos-alerts run      # the alert rules -> pos.alerts (src/pos_lambda/alerts/processor.py)
    pos-receipts run    # one record per receipt -> pos.receipts (src/pos_lambda/dedup/)

Each names its settings section (`ProcessorSettings`: POS_ALERTS_*, POS_RECEIPTS_*), its
topics and its step; everything below is shared.

**Exactly once** (`..._MODE=exactly_once`, the default). The consumer reads with
`isolation.level=read_committed` and never auto-commits. Input records are processed in
transactions of at most `..._TRANSACTION_MAX_MS` / `..._MAX_MESSAGES`; each
transaction carries the records its input produced *and* the consumer's positions
(`send_offsets_to_transaction` with the consumer's group metadata, KIP-447), so a
record's outputs and its offset commit become visible together or not at all. Readers of
the output with `read_committed` never see a record of an aborted transaction.

**Step state** (for the alerts: receipts seen per natural key, last activity per device)
is rebuilt, not stored: on assignment, each partition's state is recomputed by re-reading
that input partition from its start up to the group's committed offset, without producing
(src/pos_lambda/transactional/restore.py). A step is a pure function of a partition's
records in offset order, so the rebuilt state is exactly the one the previous owner had at its last
commit, and a restart yields exactly the outputs an uninterrupted run would. Chosen over
a compacted changelog topic written in the same transaction (Kafka Streams' approach)
because there is no second copy of the state to keep consistent: nothing to get wrong
in a crash. Its costs: restoring reads the partition's whole history (about 1 s per
100k records here), and it needs the input's retention to cover every receipt whose
copies (or, for the alerts, silence) the step should still see (a warning says when it
does not; the local broker keeps everything). Past that, a changelog topic is the
upgrade path. A state is kept across a rebalance when the partition's committed offset
shows that nobody processed it in between.

**A growing input topic** (src/pos_lambda/transactional/layout.py). The state is per
partition because producers key by device; when the partition count grows, keys move.
Each record is processed on its home partition under the count in force (a record
elsewhere is forwarded there, in the same transaction), each partition's committed
offset carries the counts it was processed under, and after a change of the count a
partition's state is rebuilt from the records of every partition that now belong to it.
New partitions are seen within `topic.metadata.refresh.interval.ms` (5 s). A topic with
fewer partitions than it was processed with (recreated) is refused: EXIT_FATAL.

**The transaction's life cycle** is a pure state machine
(src/pos_lambda/transactional/lifecycle.py): this shell turns what its clients do into
events (a record polled, a poll's records done, partitions revoked or lost, a call
failed for good, a commit done, stop) and carries out the actions it returns (begin,
commit, abort, mark states stale, rewind, back off, exit). The two modes are two
committers (src/pos_lambda/transactional/committers.py).

**Errors.** Retriable errors (a coordinator moving, a timeout) are retried with
backoff; errors that require an abort abort the transaction, rewind the consumer to
the committed offsets and rebuild the state from there; fatal errors, fencing among
them, stop the instance at once: it closes its consumer without committing and writes
nothing more. `transactional.id` is `pos-<name>-<instance id>`: a restarted
instance fences its predecessor (a zombie's open transaction is aborted) and takes over.
Two *live* instances with one id would fence each other in turn forever: an instance
first takes a lease on its id in Cassandra (src/pos_lambda/transactional/lease.py) and
refuses to start (EXIT_ID_IN_USE) while another one holds it. A Kafka call that hangs
past its timeout restarts the instance in place (src/pos_lambda/transactional/watchdog.py), at most
`..._MAX_RESTARTS_IN_PLACE` times in a row without a commit; the restarts are
counted in the progress the instance logs.
SIGTERM/SIGINT commit the open transaction (or abort it, if it cannot commit) and exit.

**At least once** (`..._MODE=at_least_once`, for comparison only): no
transactions; the outputs are flushed, then the offsets committed. A crash between the
two re-emits the outputs of the records after the last commit (same keys).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaClients, KafkaConsumer
from pos_lambda.backoff import Backoff, retry
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda.settings import ProcessorSettings, Settings
from pos_lambda.transactional import layout, lifecycle, restore, watchdog
from pos_lambda.transactional.committers import (
    SEND_OFFSETS_TIMEOUT_S,
    AtLeastOnce,
    Committer,
    ExactlyOnce,
)
from pos_lambda.transactional.layout import History
from pos_lambda.transactional.lease import Lease
from pos_lambda.transactional.lifecycle import (
    EXIT_FATAL,
    EXIT_FENCED,
    Call,
    ErrorKind,
    Failed,
    Phase,
)
from pos_lambda.transactional.refused import RECORD_REFUSED, RefusedOutputs, dead_letter
from pos_lambda.transactional.step import Output, Source, Step
from pos_lambda.transactional.watchdog import Watchdog, restart_in_place

__all__ = [
    "EXIT_FATAL",
    "EXIT_FENCED",
    "EXIT_ID_IN_USE",
    "EXIT_RESTARTS_EXHAUSTED",
    "HANG_MARGIN_S",
    "SEND_OFFSETS_TIMEOUT_S",
    "CallFailed",
    "Clock",
    "Fatal",
    "Job",
    "Processor",
    "classify",
]

T = TypeVar("T")
S = TypeVar("S")

EXIT_ID_IN_USE = 5  # another live instance holds this id (its lease): not started
# A call hung again after the last allowed in-place restart (transactional/watchdog.py).
EXIT_RESTARTS_EXHAUSTED = watchdog.EXIT_RESTARTS_EXHAUSTED
_FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}
_IDLE_POLL_S = 0.5  # how often an idle loop looks at the stop flag
# A blocking transactional call gets its own timeout plus this before the watchdog
# declares it hung (librdkafka#5456: send_offsets_to_transaction ignores its timeout).
HANG_MARGIN_S = 10.0
# The waits between tries of a client call that failed with a retriable error: 0.1 s,
# doubling, at most 5 s (a coordinator that moves is back within seconds).
CALL_BACKOFF = Backoff(0.1, cap_s=5.0)
_MAX_BATCH = 500
_PROGRESS_EVERY_S = 10.0


def classify(err: KafkaError) -> ErrorKind:
    """What an error from a (transactional) client call means for the processor:
    fenced or fatal (stop, write nothing more), abort (abort the transaction and
    rewind), retry (call again), fail (anything else: treat as fatal, or abort)."""
    if err.code() in _FENCED_CODES or (err.fatal() and "fenced" in err.str().lower()):
        return ErrorKind.FENCED
    if err.fatal():
        return ErrorKind.FATAL
    if err.txn_requires_abort():
        return ErrorKind.ABORT
    return ErrorKind.RETRY if err.retriable() else ErrorKind.FAIL


class Fatal(Exception):
    """A Kafka error after which an instance must stop and write nothing more."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error

    @property
    def fenced(self) -> bool:
        return classify(self.error) is ErrorKind.FENCED


class CallFailed(Exception):
    """A call failed for good: unwinds to where the shell hands `failed` to the life
    cycle (the one exception that steers the shell)."""

    def __init__(self, failed: Failed) -> None:
        super().__init__(failed.text)
        self.failed = failed


class Clock(Protocol):
    """Time as the shell sees it (a virtual clock in unit tests)."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # backoff between retries, not synchronisation


@dataclass(frozen=True)
class Job:
    """What one kind of processor is: its name (transactional.id `pos-<name>-<instance>`,
    logger `pos.<name>`, failpoint `<name>.after_produce`), its settings section
    (`settings.<name>`), its topics and what its outputs are called in its totals."""

    name: str
    section: ProcessorSettings
    input_topic: str
    output_topic: str
    outputs: str = "outputs"  # the totals' key for records produced ("alerts", "receipts")
    # Where an input record goes whose outputs the broker refuses for good
    # (transactional/refused.py); its dead letter is written in the same transaction.
    dead_letter_topic: str = "pos.dead_letters"

    @property
    def transactional_id(self) -> str:
        return f"pos-{self.name}-{self.section.instance_id}"

    @property
    def env_prefix(self) -> str:
        return f"POS_{self.name.upper()}_"


class Processor(Generic[S]):
    """One instance. `run(stop)` returns an exit code (0, EXIT_FATAL, EXIT_FENCED)."""

    def __init__(
        self,
        settings: Settings,
        job: Job,
        step: Step[S],
        restart: Callable[[str], None] | None = None,
        lease: Lease | None = None,
        clients: KafkaClients | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings, self.job, self.step = settings, job, step
        self.section = job.section
        self.log = logging.getLogger(f"pos.{job.name}")
        # What a hung client call leads to (src/pos_lambda/transactional/watchdog.py): an
        # in-place restart, at most `max_restarts_in_place` in a row.
        self.restart = restart or partial(
            restart_in_place,
            limit=job.section.max_restarts_in_place,
            setting=f"{job.env_prefix}MAX_RESTARTS_IN_PLACE",
        )
        self.lease = lease  # held for this instance's id (transactional/lease.py), or None
        self.clock: Clock = clock or SystemClock()
        self.stop: threading.Event | None = None
        self.topic = job.input_topic
        self.failpoint = f"{job.name}.after_produce"
        self.failpoints = Failpoints.from_settings(settings.faults)
        self.limits = lifecycle.Limits(
            self.section.transaction_max_messages, self.section.transaction_max_ms / 1000
        )
        self.life = lifecycle.Life()
        # Each owned partition's step state, and the committed offset it corresponds to
        # (a partition missing from `synced` is stale: rebuilt before it is used again).
        self.states: dict[int, S] = {}
        self.synced: dict[int, int] = {}
        # The input's partition count the owned partitions are processed under (read at
        # each assignment), and each owned partition's layout history extended to it:
        # what its offset commits carry (transactional/layout.py).
        self.count = 0
        self.histories: dict[int, History] = {}
        self.owned: set[int] = set()  # the partitions assigned to this instance now
        self.refused = RefusedOutputs(job.section.refused_output_patience_s)
        self.isolating: Source | None = None  # the record whose outputs are sent alone
        self.output_batches = 0  # batches that produced something (for the failpoint)
        self.failed_deliveries = 0
        # What happened where the loop could not act on it at once (a client's error
        # callback, a rebalance callback inside consume()): acted on by the loop.
        self.pending: BaseException | None = None
        self.restarts_in_place, self.restarts_in_a_row = watchdog.restarts()
        # The Kafka port (adapters/kafka_clients.py): the real broker, or a fake in tests.
        self.clients = clients or ConfluentClients.from_settings(settings)
        self.consumer = self.clients.group_consumer(
            self.section.group_id,
            instance_id=job.transactional_id,
            session_timeout_ms=self.section.session_timeout_ms,
        )
        self.committer = self._committer()
        self.producer = self.committer.producer
        self.watchdog = Watchdog(self._on_hang)

    def _committer(self) -> Committer:
        if self.section.mode == "exactly_once":
            producer = self.clients.transactional_producer(
                self.job.transactional_id,
                self.section.transaction_timeout_ms,
                error_cb=self._on_error,
            )
            return ExactlyOnce(producer, self.consumer, self._call, self.section.coordinator_wait_s)
        producer = self.clients.producer(error_cb=self._on_error)
        return AtLeastOnce(producer, self.consumer, self._call, self._flush_deliveries)

    @property
    def totals(self) -> dict[str, int]:
        """What the instance logs as its progress and serves as metrics."""
        t = self.life.totals
        return {
            "records": t.records, self.job.outputs: t.outputs, "commits": t.commits,
            "aborts": t.aborts, "dead_letters": t.dead_letters, "forwarded": t.forwarded,
            "restarts_in_place": self.restarts_in_place,
            # A commit starts a new row of restarts (watchdog.committed).
            "restarts_in_a_row": 0 if t.commits else self.restarts_in_a_row,
        }  # fmt: skip

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        self.stop = stop
        try:
            self._attempt(self.committer.start)
            if self.life.exit_code is None:
                self.consumer.subscribe(
                    [self.topic],
                    on_assign=self._guarded(self._on_assign),
                    on_revoke=self._guarded(self._on_revoke),
                    on_lost=self._guarded(self._on_lost),
                )
                self.log.info(
                    "%s: %s from %s to %s, group %s",
                    self.job.transactional_id, self.section.mode, self.topic,
                    self.job.output_topic, self.section.group_id,
                )  # fmt: skip
                self._loop(stop)
            assert self.life.exit_code is not None
            return self.life.exit_code
        except KafkaException:
            # Neither fatal nor retriable nor abortable: where it came from, for the report.
            self.log.exception("unexpected Kafka error: stopping")
            raise
        finally:
            self._close()
            self.watchdog.close()

    def _loop(self, stop: threading.Event) -> None:
        last_report = self.clock.monotonic()
        while self.life.exit_code is None:
            if stop.is_set():
                self._on(lifecycle.Stop())
                continue
            self._attempt(self._poll_and_process)
            if self.clock.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = self.clock.monotonic()
                self.log.info("progress: %s", self.totals)

    def _attempt(self, work: Callable[[], None]) -> None:
        """`work`; a call in it that failed for good goes to the life cycle."""
        try:
            work()
        except CallFailed as exc:
            self._on(exc.failed)

    def _on(self, event: lifecycle.Event) -> None:
        """Hand `event` to the life cycle and carry out its actions, in order. An action
        that fails ends the list: the failure is the next event."""
        self.life, actions = lifecycle.step(self.limits, self.life, event)
        for action in actions:
            try:
                self._carry_out(action)
            except CallFailed as exc:
                self._on(exc.failed)
                return

    def _carry_out(self, action: lifecycle.Action) -> None:
        match action:
            case lifecycle.Begin():
                self.committer.begin()
            case lifecycle.Commit(outputs=outputs):
                self._commit(outputs)
                self._on(lifecycle.Committed())
            case lifecycle.Abort():
                self.committer.abort()
            case lifecycle.MarkStale(partitions=stale):
                for partition in list(self.synced) if stale is None else stale:
                    self.synced.pop(partition, None)
            case lifecycle.Rewind():
                assignment = self.consumer.assignment()
                if assignment:
                    for tp in self._restore(self.consumer, assignment):
                        self.consumer.seek(tp)
            case lifecycle.Forget(partitions=partitions):
                for partition in partitions:
                    self.states.pop(partition, None)
                    self.synced.pop(partition, None)
            case lifecycle.BackOff(seconds=seconds):
                self.clock.sleep(seconds)
            case lifecycle.Say(level=level, text=text):
                self.log.log(level, "%s", text)
            case lifecycle.Exit(code=0):
                self.log.info("stopped: %s", self.totals)
            case lifecycle.Exit():
                pass  # said why (Say) just before

    def _poll_and_process(self) -> None:
        self._act_on_pending()
        max_records = max(1, min(_MAX_BATCH, lifecycle.room(self.limits, self.life)))
        # consume(n, timeout) waits for n records or the whole timeout: wait for the first
        # one only (poll), then take what has already arrived. Records are processed, and
        # at least once their outputs sent, as they come, not at the end of a wait.
        wait = lifecycle.wait_s(self.limits, self.life, self.clock.monotonic(), _IDLE_POLL_S)
        first = self.consumer.poll(wait)
        self._act_on_pending()
        if first is not None:
            # Processed before consume(): a revocation served inside it commits the open
            # transaction at the consumer's position, which already counts this record.
            self._process(first)
            if max_records > 1 and self.life.exit_code is None:
                more = self.consumer.consume(max_records - 1, timeout=0)
                self._act_on_pending()
                for msg in more:
                    if self.life.exit_code is not None:
                        return
                    self._process(msg)
        self._on(lifecycle.Due(self.clock.monotonic()))

    def _process(self, msg: Any) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise CallFailed(Failed(Call.CONSUME, classify(err), str(err)))
            self.log.warning("consumer: %s", err)
            return
        state = self.states.get(msg.partition())
        if state is None or msg.partition() not in self.owned:
            return  # fetched before a revocation: no longer ours
        source = Source(msg.partition(), msg.offset(), msg.timestamp()[1])
        forwarder = layout.forwarded_by(msg.headers())
        if forwarder is not None and forwarder != self.job.name:
            return  # another kind of processor's forward: this one forwards the original
        self._on(lifecycle.Polled(self.clock.monotonic()))
        if self.life.phase is not Phase.OPEN:
            return  # the transaction could not begin: the instance is stopping
        target = layout.home(msg.key(), self.count)
        if target is not None and target != source.partition and _keeps_state(msg.value()):
            self._on(lifecycle.Processed(source.partition, 0, forwarded=True))
            self._forward(msg, source, target)
            return
        outputs = self.step.apply(state, msg.value(), source)
        verdict, reason = self.refused.verdict(source, self.clock.monotonic())
        # Told before the outputs are sent: if sending fails, the abort knows that this
        # partition's state ran ahead of its committed offset.
        self._on(
            lifecycle.Processed(
                source.partition, len(outputs), dead_lettered=verdict == "dead_letter"
            )
        )
        if verdict == "dead_letter":
            self._dead_letter(source, outputs, reason)
        elif verdict == "send_alone" and outputs:
            self._send_alone(source, outputs)
        else:
            for output in outputs:
                self._produce(output, source)

    def _forward(self, msg: Any, source: Source, target: int) -> None:
        """A record off its home partition (a producer with the old partition count, or
        another partitioner): to its home, byte for byte, in this transaction."""
        headers = (
            *(msg.headers() or ()),
            (layout.FORWARDED_BY, self.job.name.encode()),
            (layout.FORWARDED_FROM, f"{source.partition}:{source.offset}".encode()),
        )
        forward = Output(msg.key(), msg.value(), headers)
        self._produce(
            forward, source, topic=self.topic, partition=target, timestamp=source.timestamp_ms
        )

    def _produce(
        self,
        output: Output,
        source: Source,
        topic: str | None = None,
        partition: int = -1,
        timestamp: int = 0,
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    topic or self.job.output_topic,
                    key=output.key,
                    value=output.value,
                    partition=partition,
                    timestamp=timestamp,
                    headers=list(output.headers) or None,
                    on_delivery=partial(self._on_delivery, source),
                )
                return
            except BufferError:
                self.producer.poll(0.1)  # local queue full: let deliveries drain
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                kind: ErrorKind | None = ErrorKind.ABORT
                if err.code() in RECORD_REFUSED and topic is None:
                    # Larger than this producer may ever send (message.max.bytes): no
                    # limit on the broker can help. Abort; the replay dead-letters it.
                    reason = f"{err.name()}: {err.str()}"
                    now = self.clock.monotonic()
                    self.refused.note(source, reason, now, alone=True, for_good=True)
                else:
                    kind = self.committer.produce_error(classify(err))
                if kind is None:
                    raise
                raise CallFailed(Failed(Call.PRODUCE, kind, f"produce: {err}")) from exc

    def _send_alone(self, source: Source, outputs: Sequence[Output]) -> None:
        """Deliver `source`'s outputs in batches of their own (what was sent before them
        first, then them): the broker refuses whole batches, so only a refusal of these
        alone says that they are refused."""
        self._flush_deliveries()
        self.isolating = source
        try:
            for output in outputs:
                self._produce(output, source)
            self._flush_deliveries()
        finally:
            self.isolating = None
        self.refused.delivered(source)

    def _dead_letter(self, source: Source, outputs: Sequence[Output], reason: str) -> None:
        self.log.error(
            "%s[%d] offset %d: its outputs are refused (%s): writing a dead letter to %s "
            "instead", self.topic, source.partition, source.offset, reason,
            self.job.dead_letter_topic,
        )  # fmt: skip
        letter = dead_letter(
            self.job.name, self.topic, self.job.output_topic, source, outputs, reason
        )
        self._produce(letter, source, topic=self.job.dead_letter_topic)

    # --- commit ----------------------------------------------------------------------

    def _commit(self, outputs: int) -> None:
        """The open batch's outputs and the consumer's positions, durable together (or,
        at least once, in turn)."""
        if outputs:
            self.output_batches += 1
            self._maybe_crash()
        assignment = self.consumer.assignment()
        # Each offset with the partition counts it was processed under (its metadata).
        offsets = [
            TopicPartition(
                tp.topic, tp.partition, tp.offset, metadata=self._history(tp.partition).encode()
            )
            for tp in self.consumer.position(assignment)
            if tp.offset >= 0
        ]
        self.committer.commit(offsets)
        for tp in offsets:
            self.synced[tp.partition] = tp.offset
            self.refused.committed(tp.partition, tp.offset)
        watchdog.committed()  # progress: the next hang starts a new row of restarts

    def _flush_deliveries(self) -> None:
        self.failed_deliveries = 0
        if self.producer.flush(60) or self.failed_deliveries:
            # Some outputs may be lost: do not commit past their records, reprocess them.
            text = f"{self.failed_deliveries} deliveries failed"
            raise CallFailed(Failed(Call.FLUSH, ErrorKind.ABORT, text))

    def _maybe_crash(self) -> None:
        """Testing only (POS_<NAME>_CRASH_POINT): die or freeze with outputs produced and
        on the broker, the transaction still open."""
        if self.failpoints.is_armed(self.failpoint, self.output_batches):
            self.producer.flush(30)
            self.failpoints.hit(self.failpoint, self.output_batches)

    def _close(self) -> None:
        try:
            self.consumer.close()  # leaves the group; commits nothing (auto-commit is off)
        except (KafkaException, RuntimeError) as exc:
            self.log.warning("closing the consumer: %s", exc)
        self.committer.close(dead=self.life.phase is Phase.DEAD)

    # --- rebalancing -----------------------------------------------------------------

    def _history(self, partition: int) -> History:
        return self.histories.get(partition) or History.starting(self.count)

    def _restore(
        self, consumer: KafkaConsumer, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Make each partition's state match its committed offset under the partition
        count `self.count`; where to start reading."""
        owned = {tp.partition for tp in partitions}
        committed = self._committed(consumer, partitions)
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
        offsets = {tp.partition: max(tp.offset, 0) for tp in committed}
        recorded = {tp.partition: History.decode(tp.metadata, self.count) for tp in committed}
        self._check_shrunk(recorded)
        # From the committed offset on, each owned partition is processed under `count`.
        histories = {p: h.extended(offsets[p], self.count) for p, h in recorded.items()}
        targets = {p for p in owned if p not in self.states or self.synced.get(p) != offsets[p]}
        if targets:
            # The other partitions' histories say whether records below their committed
            # offsets belong to these states (only after a change of the count).
            others = self._peek_committed([p for p in range(self.count) if p not in owned])
            for p, (offset, metadata) in others.items():
                offsets[p] = offset
                histories.setdefault(p, History.decode(metadata, self.count))
            self._check_shrunk(histories)
            self._rebuild(targets, offsets, histories)
        self.histories.update({p: histories[p] for p in owned})
        return [
            TopicPartition(
                self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in committed
        ]

    def _rebuild(
        self, targets: set[int], offsets: dict[int, int], histories: dict[int, History]
    ) -> None:
        """The states of `targets` from every record processed in place below the committed
        offsets that belongs to them under `self.count` (transactional/layout.py), each
        source partition read once."""
        t0 = self.clock.monotonic()
        states = {p: self.step.initial() for p in targets}
        name, count = self.job.name, self.count

        def apply_to(source_partition: int) -> Callable[[Any, Source], bool]:
            history = histories[source_partition]

            def apply(msg: Any, source: Source) -> bool:
                key = msg.key()
                forwarder = layout.forwarded_by(msg.headers())
                if not layout.processed_in_place(
                    history, source.partition, source.offset, key, forwarder, name
                ):
                    return False
                home = layout.home(key, count)
                state = states.get(source.partition if home is None else home)
                if state is None:
                    return False
                self.step.apply(state, msg.value(), source)  # outputs already committed
                return True

            return apply

        applied = 0
        for partition, until in layout.reads_for_rebuild(targets, count, histories, offsets):
            applied += restore.replay(
                self.clients,
                self.topic,
                partition,
                until,
                apply_to(partition),
                stall_s=self.section.restore_stall_s,
            )
        for p in targets:
            self.states[p], self.synced[p] = states[p], offsets[p]
        self.log.info(
            "partitions %s: state rebuilt from %d records below their committed offsets "
            "(%d partitions) in %.2f s",
            sorted(targets), applied, count, self.clock.monotonic() - t0,
        )  # fmt: skip

    def _check_shrunk(self, histories: dict[int, History]) -> None:
        largest = max((h.largest for h in histories.values()), default=self.count)
        if largest > self.count:
            raise CallFailed(Failed(Call.LAYOUT, ErrorKind.FATAL, (
                f"{self.topic} has {self.count} partitions, but group "
                f"{self.section.group_id} processed it with {largest}: it was recreated "
                "with fewer. Kafka cannot shrink a topic, and this group's offsets and state "
                "describe the old one. Grow it back to at least that many partitions, or "
                "start over with a new group id (POS_<PROCESSOR>_GROUP_ID) on the new topic"
            )))  # fmt: skip

    def _peek_committed(self, partitions: list[int]) -> dict[int, tuple[int, str | None]]:
        """The group's committed offsets (and their metadata) of partitions other members
        own, as committed now: not waiting for transactions that hold some (a member's
        open transaction must not stall this one's assignment)."""
        if not partitions:
            return {}
        reader = self.clients.group_offsets_reader(self.section.group_id)
        try:
            tps = [TopicPartition(self.topic, p) for p in partitions]
            committed = self._committed(reader, tps)
        finally:
            reader.close()
        return {tp.partition: (max(tp.offset, 0), tp.metadata) for tp in committed}

    def _partition_count(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> int:
        """The input's partition count now (a fresh metadata request), at least what the
        assignment implies. A broker that is restarting answers late or without the
        topic's leaders for a while: retried for COORDINATOR_WAIT_S, as `_committed`."""

        def ask() -> int:
            metadata = consumer.list_topics(self.topic, timeout=30)
            topic = metadata.topics.get(self.topic)
            if topic is None or topic.error is not None:
                err = topic.error if topic is not None else None
                code = err.code() if err is not None else KafkaError.UNKNOWN_TOPIC_OR_PART
                raise KafkaException(KafkaError(code, str(err or "topic unknown")))
            return max(len(topic.partitions), *(tp.partition + 1 for tp in partitions))

        return retry(
            ask,
            CALL_BACKOFF,
            retriable=_metadata_retriable,
            patience_s=self.section.coordinator_wait_s,
            clock=self.clock.monotonic,
            sleep=self.clock.sleep,
            on_retry=lambda exc, wait: self.log.warning(
                "%s's partitions: %s; retrying in %.1f s", self.topic, exc.args[0], wait
            ),
        )

    def _committed(
        self, consumer: KafkaConsumer, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """The group's committed offsets of `partitions`. Retriable errors (a coordinator
        moving or loading; KIP-447: another member's open transaction holding the offsets
        past the call's timeout) are retried with backoff for COORDINATOR_WAIT_S."""
        return retry(
            lambda: list(consumer.committed(partitions, timeout=60)),
            CALL_BACKOFF,
            retriable=_retriable,
            patience_s=self.section.coordinator_wait_s,
            clock=self.clock.monotonic,
            sleep=self.clock.sleep,
            on_retry=lambda exc, wait: self.log.warning(
                "committed offsets: %s; retrying in %.1f s", exc.args[0], wait
            ),
        )

    def _on_assign(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        count = self._partition_count(consumer, partitions)
        if count != self.count:
            if self.count:
                self.log.warning(
                    "%s has %d partitions, was %d: rebuilding every state under the new "
                    "count", self.topic, count, self.count,
                )  # fmt: skip
            self.count = count
            self.states.clear()
            self.synced.clear()
        starts = self._restore(consumer, partitions)
        consumer.assign(starts)
        self.owned |= {tp.partition for tp in partitions}
        self.log.info("assigned partitions %s", sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        # The life cycle commits an open transaction while the partitions are still ours;
        # the next owner starts from there (its offset fetch waits for it, KIP-447).
        self._on(lifecycle.Revoked(frozenset(tp.partition for tp in partitions)))
        self.owned -= {tp.partition for tp in partitions}
        self.log.info("revoked partitions %s", sorted(tp.partition for tp in partitions))

    def _on_lost(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: our offsets can no longer be committed.
        self.owned -= {tp.partition for tp in partitions}
        self._on(lifecycle.Lost(frozenset(tp.partition for tp in partitions)))

    def _guarded(
        self, callback: Callable[[Any, list[TopicPartition]], None]
    ) -> Callable[[Any, list[TopicPartition]], None]:
        """Rebalance callbacks run inside consume(): keep their errors for the loop."""

        def run(consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
            if self.pending is not None:
                return
            try:
                callback(consumer, partitions)
            except BaseException as exc:  # acted on by _act_on_pending
                self.pending = exc

        return run

    # --- error classification ------------------------------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.pending = CallFailed(Failed(Call.BACKGROUND, classify(err), str(err)))
        else:  # connection trouble: librdkafka retries on its own
            self.log.warning("kafka: %s", err)

    def _on_delivery(self, source: Source, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            return
        self.failed_deliveries += 1
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            return  # purged by an abort: the abort is what is logged
        if err.code() in RECORD_REFUSED:
            reason = f"{err.name()}: {err.str()}"
            now = self.clock.monotonic()
            self.refused.note(source, reason, now, alone=source == self.isolating)
        self.log.warning("record not delivered: %s", err)

    def _on_hang(self, what: str) -> None:
        """The watchdog's thread: `what` blocks past its timeout. The main thread is stuck
        in C and the producer's transaction state machine with it; nothing in this process
        can end the transaction. Restart the instance in place: the restarted producer
        fences this epoch and aborts the open transaction, exactly like after a kill -9."""
        why = (
            f"{what} blocked past its timeout + {HANG_MARGIN_S:.0f} s (librdkafka#5456: "
            "coordinator requests ignore their timeout after the coordinator went away)"
        )
        if self.stop is not None and self.stop.is_set():
            # Asked to stop: do not start over. The broker aborts the open transaction
            # after transaction.timeout.ms (or the next instance with this id does).
            self.log.error("%s; stop requested: exiting without commit", why)
            logging.shutdown()
            os._exit(EXIT_FATAL)
        self.restart(why)

    def _act_on_pending(self) -> None:
        """Raise what happened outside the loop's calls: a lease taken over, a fatal error
        of the producer's background thread, an error inside a rebalance callback."""
        if self.lease is not None and self.lease.lost is not None:
            # Frozen past the lease's TTL: a newer instance has fenced this one, or is about to.
            text = f"its lease is now held by {self.lease.lost.describe()}"
            raise CallFailed(Failed(Call.LEASE, ErrorKind.FENCED, text))
        exc, self.pending = self.pending, None
        if isinstance(exc, KafkaException):
            err: KafkaError = exc.args[0]
            kind = classify(err)
            if kind in (ErrorKind.FENCED, ErrorKind.FATAL, ErrorKind.ABORT):
                raise CallFailed(Failed(Call.REBALANCE, kind, str(err))) from exc
        if exc is not None:
            raise exc

    def _call(
        self, fn: Callable[[], T], what: str, timeout_s: float, patience_s: float | None = None
    ) -> T:
        """Run a client call (given `timeout_s`), retrying retriable errors for
        `patience_s` (default: until the transaction would time out anyway); then raise
        CallFailed. A call still blocked `HANG_MARGIN_S` after its own timeout is hung: the
        watchdog restarts the instance (`_on_hang`)."""
        if patience_s is None:
            patience_s = self.section.transaction_timeout_ms / 1000

        def guarded() -> T:
            with self.watchdog.guard(what, timeout_s + HANG_MARGIN_S):
                return fn()

        try:
            return retry(
                guarded,
                CALL_BACKOFF,
                retriable=_retriable,
                patience_s=patience_s,
                clock=self.clock.monotonic,
                sleep=self.clock.sleep,
                on_retry=lambda exc, wait: self.log.warning(
                    "%s: %s; retrying in %.1f s", what, exc.args[0], wait
                ),
            )
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            raise CallFailed(Failed(Call(what), classify(err), f"{what}: {err}")) from exc


def _retriable(exc: Exception) -> bool:
    """A client call's error that the same call may get past: a coordinator moving or
    loading, a request timed out."""
    return isinstance(exc, KafkaException) and classify(exc.args[0]) is ErrorKind.RETRY


# What a metadata request meets while a broker restarts: no answer yet, or the topic
# without leaders (or not yet known) until the broker has loaded it.
_METADATA_AGAIN = (
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
)


def _metadata_retriable(exc: Exception) -> bool:
    return isinstance(exc, KafkaException) and (
        exc.args[0].code() in _METADATA_AGAIN or exc.args[0].retriable()
    )


def _keeps_state(value: bytes | None) -> bool:
    """Only a receipt changes a processor's state. Anything else (malformed input, which
    the speed layer dead-letters) is processed where it landed: forwarding it would only
    hand the speed layer a second copy to dead-letter."""
    return value is not None and isinstance(parse_message(value), Receipt)
