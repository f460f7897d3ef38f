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
from typing import Any, Generic, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaClients
from pos_lambda.failpoints import Failpoints
from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda.settings import ProcessorSettings, Settings
from pos_lambda.transactional import layout, restore, watchdog
from pos_lambda.transactional.layout import History, LayoutShrunk
from pos_lambda.transactional.lease import Lease
from pos_lambda.transactional.refused import RECORD_REFUSED, RefusedOutputs, dead_letter
from pos_lambda.transactional.step import Output, Source, Step
from pos_lambda.transactional.watchdog import Watchdog, restart_in_place

T = TypeVar("T")
S = TypeVar("S")

EXIT_FATAL = 3  # a fatal Kafka error: the instance stopped and wrote nothing more
EXIT_FENCED = 4  # another instance with the same transactional.id took over
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
# send_offsets_to_transaction's own timeout. It reaches the group and transaction
# coordinators; when one of them dies the call hangs (above), so this plus the margin is
# how long a coordinator's death stops the processor (40 s at 30 + 15 on the cluster).
# A call that times out in earnest is retried (`_call`).
SEND_OFFSETS_TIMEOUT_S = 10.0
# Backoff between consecutive aborts without a commit: 0.1 s, doubling, at most 5 s.
ABORT_BACKOFF_S = 0.1
MAX_ABORT_BACKOFF_S = 5.0
_MAX_BATCH = 500


class Fatal(Exception):
    """The instance must stop and write nothing more."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error

    @property
    def fenced(self) -> bool:
        return classify(self.error) == "fenced"


def classify(err: KafkaError) -> str:
    """What an error from a (transactional) client call means for the processor:
    "fenced" or "fatal" (stop, write nothing more), "abort" (abort the transaction and
    rewind), "retry" (call again), "fail" (anything else: treat as fatal, or abort)."""
    if err.code() in _FENCED_CODES or (err.fatal() and "fenced" in err.str().lower()):
        return "fenced"
    if err.fatal():
        return "fatal"
    if err.txn_requires_abort():
        return "abort"
    return "retry" if err.retriable() else "fail"


class LeaseTaken(Exception):
    """Another instance took this instance's lease (it was frozen past the lease's TTL):
    the newer one has fenced it, or is about to."""


class Abortable(Exception):
    """The open transaction failed: abort it, rewind to the committed offsets."""


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
        self.stop: threading.Event | None = None
        self.exactly_once = job.section.mode == "exactly_once"
        self.topic = job.input_topic
        self.failpoint = f"{job.name}.after_produce"
        self.states: dict[int, S] = {}
        # The input's partition count the owned partitions are processed under (read at
        # each assignment), and each owned partition's layout history extended to it:
        # what its offset commits carry (transactional/layout.py).
        self.count = 0
        self.histories: dict[int, History] = {}
        # The committed offset each partition's state corresponds to (-1: none yet).
        self.synced: dict[int, int] = {}
        # The partitions whose states the open batch has changed (ahead of `synced`).
        self.touched: set[int] = set()
        self.aborts_in_a_row = 0
        self.refused = RefusedOutputs(job.section.refused_output_patience_s)
        self.isolating: Source | None = None  # the record whose outputs are sent alone
        # The partitions assigned to this instance now, and how many rebalances it has
        # seen (a record polled before a rebalance is not processed after it).
        self.owned: set[int] = set()
        self.rebalances = 0
        self.polled: Any = None  # a record polled and not processed yet (see _step)
        self.open = False  # a transaction (or, at least once, an uncommitted batch)
        self.opened_at = 0.0
        self.batch_records = 0
        self.batch_outputs = 0
        self.batch_forwards = 0  # records forwarded to their home partition (layout.py)
        self.output_batches = 0  # batches that produced something (for the failpoint)
        self.failpoints = Failpoints.from_settings(settings.faults)
        total_restarts, in_a_row = watchdog.restarts()
        self.totals = {
            "records": 0, job.outputs: 0, "commits": 0, "aborts": 0, "dead_letters": 0,
            "forwarded": 0,
            "restarts_in_place": total_restarts, "restarts_in_a_row": in_a_row,
        }  # fmt: skip
        self.failed_deliveries = 0
        self.background_fatal: KafkaError | None = None
        self.callback_error: BaseException | None = None
        self.dead = False  # after a fatal error: no more writes of any kind
        # The Kafka port (adapters/kafka_clients.py): the real broker, or a fake in tests.
        self.clients = clients or ConfluentClients.from_settings(settings)
        self.consumer = self.clients.group_consumer(
            self.section.group_id,
            instance_id=job.transactional_id,
            session_timeout_ms=self.section.session_timeout_ms,
        )
        if self.exactly_once:
            self.producer = self.clients.transactional_producer(
                job.transactional_id, self.section.transaction_timeout_ms, error_cb=self._on_error
            )
        else:
            self.producer = self.clients.producer(error_cb=self._on_error)
        self.watchdog = Watchdog(self._on_hang)
        self.sleep = time.sleep  # the backoff between retries (a fake clock in unit tests)

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        self.stop = stop
        try:
            if self.exactly_once:
                # Fences any predecessor with this transactional.id and aborts its open
                # transaction before this instance reads a single offset.
                self._call(
                    lambda: self.producer.init_transactions(30),
                    "init_transactions",
                    30,
                    abortable=False,
                    patience_s=self.section.coordinator_wait_s,
                )
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
            last_report = time.monotonic()
            while not stop.is_set():
                try:
                    self._step()
                except Abortable as exc:
                    self._abort_and_rewind(str(exc))
                if time.monotonic() - last_report >= 10:
                    last_report = time.monotonic()
                    self.log.info("progress: %s", self.totals)
            self._finish()
            self.log.info("stopped: %s", self.totals)
            return 0
        except Fatal as exc:
            self.dead = True
            what = "fenced by a newer instance" if exc.fenced else "fatal Kafka error"
            self.log.error("%s (%s): stopping, writing nothing more", what, exc)
            return EXIT_FENCED if exc.fenced else EXIT_FATAL
        except LayoutShrunk as exc:
            self.dead = True
            self.log.error("%s: stopping, writing nothing more", exc)
            return EXIT_FATAL
        except LeaseTaken as exc:
            self.dead = True
            self.log.error("fenced by a newer instance (%s): stopping, writing nothing more", exc)
            return EXIT_FENCED
        except KafkaException:
            # Neither fatal nor retriable nor abortable: where it came from, for the report.
            self.log.exception("unexpected Kafka error: stopping")
            raise
        finally:
            self._close()
            self.watchdog.close()

    def _step(self) -> None:
        self._raise_pending()
        room = self.section.transaction_max_messages - self.batch_records
        max_records = max(1, min(_MAX_BATCH, room))
        # consume(n, timeout) waits for n records or the whole timeout: wait for the first
        # one only (poll), then take what has already arrived. Records are processed, and
        # at least once their outputs sent, as they come, not at the end of a wait.
        first = self.consumer.poll(self._wait_s())
        msgs = [] if first is None else [first]
        if first is not None and max_records > 1:
            rebalances = self.rebalances
            # Polled, not processed yet: a revocation served inside consume() commits the
            # open batch, and must not count this record (the consumer's position does).
            self.polled = first if first.error() is None else None
            try:
                more = self.consumer.consume(max_records - 1, timeout=0)
            finally:
                self.polled = None
            # A rebalance served inside consume() reset the fetch positions: the record
            # polled before it is stale (consume() itself returns only fresh records).
            msgs = more if self.rebalances != rebalances else msgs + more
        self._raise_pending()
        for msg in msgs:
            self._process(msg)
        if self.open and self._due():
            self._commit()

    def _wait_s(self) -> float:
        if not self.open:
            return _IDLE_POLL_S
        left = self.opened_at + self.section.transaction_max_ms / 1000 - time.monotonic()
        return max(0.0, left)

    def _due(self) -> bool:
        s = self.section
        return (
            self.batch_records >= s.transaction_max_messages
            or time.monotonic() - self.opened_at >= s.transaction_max_ms / 1000
        )

    def _process(self, msg: Any) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise Fatal(err)
            self.log.warning("consumer: %s", err)
            return
        state = self.states.get(msg.partition())
        if state is None or msg.partition() not in self.owned:
            return  # fetched before a revocation: no longer ours
        source = Source(msg.partition(), msg.offset(), msg.timestamp()[1])
        forwarder = layout.forwarded_by(msg.headers())
        if forwarder is not None and forwarder != self.job.name:
            return  # another kind of processor's forward: this one forwards the original
        if not self.open:
            self._begin()
        target = layout.home(msg.key(), self.count)
        if target is not None and target != source.partition and _keeps_state(msg.value()):
            self._forward(msg, source, target)
            return
        outputs = self.step.apply(state, msg.value(), source)
        self.touched.add(msg.partition())
        verdict, reason = self.refused.verdict(source, time.monotonic())
        if verdict == "dead_letter":
            self._dead_letter(source, outputs, reason)
        elif verdict == "send_alone" and outputs:
            self._send_alone(source, outputs)
        else:
            for output in outputs:
                self._produce(output, source)
        if verdict != "dead_letter":
            self.batch_outputs += len(outputs)
        self.batch_records += 1

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
        self.batch_records += 1
        self.batch_forwards += 1

    def _begin(self) -> None:
        if self.exactly_once:
            self._call(self.producer.begin_transaction, "begin_transaction", 30)
        self.open, self.opened_at = True, time.monotonic()
        self.batch_records = self.batch_outputs = self.batch_forwards = 0

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
                if err.code() in RECORD_REFUSED and topic is None:
                    # Larger than this producer may ever send (message.max.bytes): no
                    # limit on the broker can help. Abort; the replay dead-letters it.
                    reason = f"{err.name()}: {err.str()}"
                    self.refused.note(source, reason, time.monotonic(), alone=True, for_good=True)
                    raise Abortable(f"produce: {err}") from exc
                if self.exactly_once and classify(err) in ("retry", "fail"):
                    # The transaction cannot take this record (its state is broken, the
                    # record refused): abort it and replay from the committed offsets.
                    raise Abortable(f"produce: {err}") from exc
                self._classify(err)

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
        self.totals["dead_letters"] += 1

    # --- commit, abort, rewind ----------------------------------------------------------

    def _commit(self) -> None:
        """Close the open batch: outputs and offsets together (or, at least once, in turn)."""
        if self.batch_outputs:
            self.output_batches += 1
            self._maybe_crash()
        assignment = self.consumer.assignment()
        polled = (self.polled.partition(), self.polled.offset()) if self.polled else None
        # Each offset with the partition counts it was processed under (its metadata).
        offsets = [
            TopicPartition(
                tp.topic,
                tp.partition,
                min(tp.offset, polled[1]) if polled and tp.partition == polled[0] else tp.offset,
                metadata=self._history(tp.partition).encode(),
            )
            for tp in self.consumer.position(assignment)
            if tp.offset >= 0
        ]
        if self.exactly_once:
            self._call(
                lambda: self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S
                ),
                "send_offsets_to_transaction",
                SEND_OFFSETS_TIMEOUT_S,
            )
            self._call(lambda: self.producer.commit_transaction(60), "commit_transaction", 60)
        else:
            self._flush_deliveries()
            if offsets:
                self._call(
                    lambda: self.consumer.commit(offsets=offsets, asynchronous=False), "commit", 60
                )
        for tp in offsets:
            self.synced[tp.partition] = tp.offset
            self.refused.committed(tp.partition, tp.offset)
        self.touched.clear()
        self.aborts_in_a_row = 0
        self.open = False
        self.totals["records"] += self.batch_records
        self.totals[self.job.outputs] += self.batch_outputs
        self.totals["forwarded"] += self.batch_forwards
        self.totals["commits"] += 1
        watchdog.committed()  # progress: the next hang starts a new row of restarts
        self.totals["restarts_in_a_row"] = 0

    def _flush_deliveries(self) -> None:
        self.failed_deliveries = 0
        if self.producer.flush(60) or self.failed_deliveries:
            # Some outputs may be lost: do not commit past their records, reprocess them.
            raise Abortable(f"{self.failed_deliveries} deliveries failed")

    def _maybe_crash(self) -> None:
        """Testing only (POS_<NAME>_CRASH_POINT): die or freeze with outputs produced and
        on the broker, the transaction still open."""
        if self.failpoints.is_armed(self.failpoint, self.output_batches):
            self.producer.flush(30)
            self.failpoints.hit(self.failpoint, self.output_batches)

    def _abort_and_rewind(self, why: str) -> None:
        self.log.warning(
            "aborting the open transaction (%s); rewinding to the committed offsets", why
        )
        if self.exactly_once and self.open:
            self._abort()
        self.open = False
        self.totals["aborts"] += 1
        self.aborts_in_a_row += 1
        if self.aborts_in_a_row > 1:
            # The same trouble again (a refused output, a coordinator moving): back off
            # instead of hammering the broker with begin-produce-abort cycles.
            delay = min(ABORT_BACKOFF_S * 2 ** (self.aborts_in_a_row - 2), MAX_ABORT_BACKOFF_S)
            self.log.warning("%d aborts in a row: backing off %.1f s", self.aborts_in_a_row, delay)
            self.sleep(delay)
        # The states of the partitions the aborted batch read ran ahead of their committed
        # offsets: rebuild them, or the replayed records would look like resends of
        # themselves and emit nothing (issue 61: their offsets then committed, outputs lost).
        for partition in self.touched:
            self.synced.pop(partition, None)
        self.touched.clear()
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for tp in self._restore(self.consumer, assignment):
            self.consumer.seek(tp)

    def _abort(self) -> None:
        # A timed-out abort is retriable ("retry call to resume"), and so is a coordinator
        # still completing the previous transaction: wait for it, do not exit.
        self._call(
            lambda: self.producer.abort_transaction(30),
            "abort_transaction",
            30,
            abortable=False,
            patience_s=self.section.coordinator_wait_s,
        )

    def _finish(self) -> None:
        """On stop: commit the open batch, or abort it if it cannot commit."""
        if not self.open:
            return
        try:
            self._commit()
        except Abortable as exc:
            self.log.warning("could not commit on stop (%s): aborting", exc)
            if self.exactly_once:
                self._abort()
            self.open = False

    def _close(self) -> None:
        try:
            self.consumer.close()  # leaves the group; commits nothing (auto-commit is off)
        except (KafkaException, RuntimeError) as exc:
            self.log.warning("closing the consumer: %s", exc)
        if not self.dead and not self.exactly_once:
            self.producer.flush(30)

    # --- rebalancing -----------------------------------------------------------------

    def _history(self, partition: int) -> History:
        return self.histories.get(partition) or History.starting(self.count)

    def _restore(self, consumer: Any, partitions: list[TopicPartition]) -> list[TopicPartition]:
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
        t0 = time.monotonic()
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
            sorted(targets), applied, count, time.monotonic() - t0,
        )  # fmt: skip

    def _check_shrunk(self, histories: dict[int, History]) -> None:
        largest = max((h.largest for h in histories.values()), default=self.count)
        if largest > self.count:
            raise LayoutShrunk(
                f"{self.topic} has {self.count} partitions, but group "
                f"{self.section.group_id} processed it with {largest}: it was recreated "
                "with fewer. Kafka cannot shrink a topic, and this group's offsets and state "
                "describe the old one. Grow it back to at least that many partitions, or "
                "start over with a new group id (POS_<PROCESSOR>_GROUP_ID) on the new topic"
            )

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

    def _partition_count(self, consumer: Any, partitions: list[TopicPartition]) -> int:
        """The input's partition count now (a fresh metadata request), at least what the
        assignment implies."""
        metadata = consumer.list_topics(self.topic, timeout=30)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            raise KafkaException(
                topic.error if topic is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            )
        return max(len(topic.partitions), *(tp.partition + 1 for tp in partitions))

    def _committed(self, consumer: Any, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets of `partitions`. Retriable errors (a coordinator
        moving or loading; KIP-447: another member's open transaction holding the offsets
        past the call's timeout) are retried with backoff for COORDINATOR_WAIT_S."""
        deadline = time.monotonic() + self.section.coordinator_wait_s
        delay = 0.1
        while True:
            try:
                return list(consumer.committed(partitions, timeout=60))
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if classify(err) != "retry" or time.monotonic() >= deadline:
                    raise
                self.log.warning("committed offsets: %s; retrying in %.1f s", err, delay)
                self.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
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

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        # Commit what was processed while the partitions are still ours; the next owner
        # starts from there (its offset fetch waits for this transaction, KIP-447).
        if self.open and not self.dead:
            try:
                self._commit()
            except Abortable as exc:
                self._drop_open_batch(f"revoked mid-transaction: {exc}")
        self.owned -= {tp.partition for tp in partitions}
        self.log.info("revoked partitions %s", sorted(tp.partition for tp in partitions))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: our offsets can no longer be committed.
        self.rebalances += 1
        self.owned -= {tp.partition for tp in partitions}
        if self.open and not self.dead:
            self._drop_open_batch("partitions lost")
        for tp in partitions:
            self.states.pop(tp.partition, None)
            self.synced.pop(tp.partition, None)

    def _drop_open_batch(self, why: str) -> None:
        self.log.warning("aborting the open transaction: %s", why)
        if self.exactly_once:
            self._abort()
        self.open = False
        self.totals["aborts"] += 1
        # Every state ran ahead of its committed offset: rebuild on the next assignment.
        self.synced.clear()
        self.touched.clear()

    def _guarded(
        self, callback: Callable[[Any, list[TopicPartition]], None]
    ) -> Callable[[Any, list[TopicPartition]], None]:
        """Rebalance callbacks run inside consume(): keep their errors for the loop."""

        def run(consumer: Any, partitions: list[TopicPartition]) -> None:
            if self.callback_error is not None:
                return
            try:
                callback(consumer, partitions)
            except BaseException as exc:  # re-raised by _raise_pending
                self.callback_error = exc

        return run

    # --- error classification ------------------------------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.background_fatal = err
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
            self.refused.note(source, reason, time.monotonic(), alone=source == self.isolating)
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

    def _raise_pending(self) -> None:
        if self.lease is not None and self.lease.lost is not None:
            raise LeaseTaken(f"its lease is now held by {self.lease.lost.describe()}")
        if self.background_fatal is not None:
            raise Fatal(self.background_fatal)
        if self.callback_error is not None:
            exc, self.callback_error = self.callback_error, None
            if isinstance(exc, KafkaException):
                self._classify(exc.args[0])
            raise exc

    def _classify(self, err: KafkaError) -> None:
        """Raise what `err` means for the loop: Fatal, Abortable, or KafkaException."""
        kind = classify(err)
        if kind in ("fenced", "fatal"):
            raise Fatal(err)
        if kind == "abort":
            raise Abortable(str(err))
        raise KafkaException(err)

    def _call(
        self,
        fn: Callable[[], T],
        what: str,
        timeout_s: float,
        abortable: bool = True,
        patience_s: float | None = None,
    ) -> T:
        """Run a transactional call (given `timeout_s`), retrying retriable errors for
        `patience_s` (default: until the transaction would time out anyway). Raises Fatal,
        or Abortable (if `abortable` and a transaction is open; else Fatal). A call still
        blocked `HANG_MARGIN_S` after its own timeout is hung: the watchdog restarts the
        instance (`_on_hang`)."""
        if patience_s is None:
            patience_s = self.section.transaction_timeout_ms / 1000
        deadline = time.monotonic() + patience_s
        delay = 0.1
        while True:
            try:
                with self.watchdog.guard(what, timeout_s + HANG_MARGIN_S):
                    return fn()
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                kind = classify(err)
                if kind == "retry" and time.monotonic() < deadline:
                    self.log.warning("%s: %s; retrying in %.1f s", what, err, delay)
                    # Backoff between retries of a failed call, not synchronisation.
                    self.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if kind in ("fenced", "fatal") or not (abortable and self.open):
                    raise Fatal(err) from exc
                # Abortable, or retried until the transaction would time out anyway.
                raise Abortable(f"{what}: {err}") from exc


def _keeps_state(value: bytes | None) -> bool:
    """Only a receipt changes a processor's state. Anything else (malformed input, which
    the speed layer dead-letters) is processed where it landed: forwarding it would only
    hand the speed layer a second copy to dead-letter."""
    return value is not None and isinstance(parse_message(value), Receipt)
