"""The alerts processor: transactional read-process-write from `pos.transactions` to
`pos.alerts` (the imperative shell around src/pos_lambda/alerts/rules.py).

    pos-alerts run                      # one instance; start more with other POS_ALERTS_INSTANCE_ID
    make alerts

**Exactly once** (`POS_ALERTS_MODE=exactly_once`, the default). The consumer reads with
`isolation.level=read_committed` and never auto-commits. Input records are processed in
transactions of at most `POS_ALERTS_TRANSACTION_MAX_MS` / `..._MAX_MESSAGES`; each
transaction carries the alerts its records triggered *and* the consumer's positions
(`send_offsets_to_transaction` with the consumer's group metadata, KIP-447), so a
record's alerts and its offset commit become visible together or not at all. Readers of
`pos.alerts` with `read_committed` never see an alert of an aborted transaction.

**Rule state** (receipts seen per natural key, last activity per device) is rebuilt,
not stored: on assignment, each partition's state is recomputed by re-reading that
input partition from its start up to the group's committed offset, without producing
(src/pos_lambda/alerts/restore.py). The rules are a pure function of a partition's records in offset
order, so the rebuilt state is exactly the one the previous owner had at its last
commit, and a restart yields exactly the alerts an uninterrupted run would. Chosen over
a compacted changelog topic written in the same transaction (Kafka Streams' approach)
because there is no second copy of the state to keep consistent: nothing to get wrong
in a crash. Its costs: restoring reads the partition's whole history (about 1 s per
100k records here), and it needs the input's retention to cover every receipt whose
resends or silence the rules should still see (a warning says when it does not; the
local broker keeps everything). Past that, a changelog topic is the upgrade path.
A state is kept across a rebalance when the partition's committed offset shows that
nobody processed it in between.

**Store hours** (the silence rule) come from the `stores` table, read once when the
instance starts (`store_calendar`, also after an in-place restart) and held for its
lifetime; an edit (`pos-stores set`, a new store) applies from the instance's next
restart (restart every instance: a rolling restart loses nothing). Why a snapshot and
not a periodic refresh: exactly once would hold either way (the rule state, the last
receipt per device, does not depend on the hours, so a rebuild is the same whatever
the calendar; a record's alerts are decided in the one transaction that commits its
offset), but with a snapshot the alerts are a function of the records and one calendar
per process: a replay after an abort re-emits the very same alerts (same bytes), and
which hours judged a receipt is known (logged at start, and in the alert's detail)
rather than a matter of when a refresh happened to land.

**Errors.** Retriable errors (a coordinator moving, a timeout) are retried with
backoff; errors that require an abort abort the transaction, rewind the consumer to
the committed offsets and rebuild the state from there; fatal errors, fencing among
them, stop the instance at once: it closes its consumer without committing and writes
nothing more. `transactional.id` is `pos-alerts-<POS_ALERTS_INSTANCE_ID>`: a restarted
instance fences its predecessor (a zombie's open transaction is aborted) and takes over.
Two *live* instances with one id would fence each other in turn forever: an instance
first takes a lease on its id in Cassandra (src/pos_lambda/alerts/lease.py) and refuses to start
(EXIT_ID_IN_USE) while another one holds it. A Kafka call that hangs past its timeout
restarts the instance in place (src/pos_lambda/alerts/watchdog.py), at most
`POS_ALERTS_MAX_RESTARTS_IN_PLACE` times in a row without a commit; the restarts are
counted in the progress the instance logs.
SIGTERM/SIGINT commit the open transaction (or abort it, if it cannot commit) and exit.

**At least once** (`POS_ALERTS_MODE=at_least_once`, for comparison only): no
transactions; the alerts are flushed, then the offsets committed. A crash between the
two re-emits the alerts of the records after the last commit (same alert ids).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from pos_lambda.alerts import restore, watchdog
from pos_lambda.alerts.lease import Lease
from pos_lambda.alerts.rules import Alert, PartitionState, Rules, Source
from pos_lambda.alerts.watchdog import Watchdog, restart_in_place
from pos_lambda.failpoints import Failpoints
from pos_lambda.settings import Settings
from pos_lambda.stores.model import Store
from pos_lambda.stores.registry import StoreRegistry

log = logging.getLogger("pos.alerts")
T = TypeVar("T")

EXIT_FATAL = 3  # a fatal Kafka error: the instance stopped and wrote nothing more
EXIT_FENCED = 4  # another instance with the same transactional.id took over
EXIT_ID_IN_USE = 5  # another live instance holds this id (its lease): not started
# A call hung again after the last allowed in-place restart (src/pos_lambda/alerts/watchdog.py).
EXIT_RESTARTS_EXHAUSTED = watchdog.EXIT_RESTARTS_EXHAUSTED
_FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}
_IDLE_POLL_S = 0.5  # how often an idle loop looks at the stop flag
# A blocking transactional call gets its own timeout plus this before the watchdog
# declares it hung (librdkafka#5456: send_offsets_to_transaction ignores its timeout).
HANG_MARGIN_S = 15.0
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


def rules_from(settings: Settings, stores: Iterable[Store] = ()) -> Rules:
    """The rules of the POS_ALERTS_* settings with `stores`' own hours (the calendar)."""
    return Rules(
        high_value=settings.alerts.high_value_threshold,
        large_return=settings.alerts.large_return_threshold,
        silence=timedelta(minutes=settings.alerts.silence_minutes),
        store_opens=settings.alerts.store_opens_at,
        store_closes=settings.alerts.store_closes_at,
        stores={s.operation_id: s for s in stores},
    )


def store_calendar(registry: StoreRegistry) -> list[Store]:
    """Every registered store, read once at start (the module docstring says why once).

    Raises RegistryUnavailable (Cassandra down) and StoreError (a row hand-edited into
    something invalid): starting with hours other than the table's would alert wrongly.
    """
    stores = registry.all()
    log.info(
        "store hours: %d store(s) from the stores table (%s); any other store: the "
        "default window, UTC; an edit applies from the next restart",
        len(stores), ", ".join(f"{s.operation_id} {s.time_zone}" for s in stores) or "none",
    )  # fmt: skip
    return stores


def transactional_id(settings: Settings) -> str:
    return f"pos-alerts-{settings.alerts.instance_id}"


class Processor:
    """One instance. `run(stop)` returns an exit code (0, EXIT_FATAL, EXIT_FENCED)."""

    def __init__(
        self,
        settings: Settings,
        rules: Rules,
        restart: Callable[[str], None] | None = None,
        lease: Lease | None = None,
    ) -> None:
        self.settings, self.rules = settings, rules
        # What a hung client call leads to (src/pos_lambda/alerts/watchdog.py): an in-place restart,
        # at most alerts_max_restarts_in_place in a row.
        self.restart = restart or partial(
            restart_in_place, limit=settings.alerts.max_restarts_in_place
        )
        self.lease = lease  # held for this instance's id (src/pos_lambda/alerts/lease.py), or None
        self.stop: threading.Event | None = None
        self.exactly_once = settings.alerts.mode == "exactly_once"
        self.topic = settings.topics.transactions
        self.states: dict[int, PartitionState] = {}
        # The committed offset each partition's state corresponds to (-1: none yet).
        self.synced: dict[int, int] = {}
        self.open = False  # a transaction (or, at least once, an uncommitted batch)
        self.opened_at = 0.0
        self.batch_records = 0
        self.batch_alerts = 0
        self.alert_batches = 0  # batches that produced alerts (for the failpoint)
        self.failpoints = Failpoints.from_settings(settings.faults)
        total_restarts, in_a_row = watchdog.restarts()
        self.totals = {
            "records": 0, "alerts": 0, "commits": 0, "aborts": 0,
            "restarts_in_place": total_restarts, "restarts_in_a_row": in_a_row,
        }  # fmt: skip
        self.failed_deliveries = 0
        self.background_fatal: KafkaError | None = None
        self.callback_error: BaseException | None = None
        self.dead = False  # after a fatal error: no more writes of any kind
        self.consumer = Consumer(self._consumer_config())
        self.producer = Producer(self._producer_config())
        self.watchdog = Watchdog(self._on_hang)

    # --- configuration ---------------------------------------------------------------

    def _consumer_config(self) -> dict[str, Any]:
        s = self.settings
        return {
            **s.kafka.security_config,
            "bootstrap.servers": s.bootstrap_servers,
            "group.id": s.alerts.group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": s.alerts.session_timeout_ms,
            # Static membership (KIP-345): a restarted instance (same id) takes its
            # partitions back at once instead of waiting out its predecessor's session.
            # The price: a stopped instance's partitions wait session.timeout.ms before
            # they move to the others (a static member does not leave the group on close).
            "group.instance.id": transactional_id(s),
            "log_level": 3,
        }

    def _producer_config(self) -> dict[str, Any]:
        s = self.settings
        config: dict[str, Any] = {
            **s.kafka.security_config,
            "bootstrap.servers": s.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "error_cb": self._on_error,
            "log_level": 3,
        }
        if self.exactly_once:
            config["transactional.id"] = transactional_id(s)
            config["transaction.timeout.ms"] = s.alerts.transaction_timeout_ms
        return config

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        self.stop = stop
        try:
            if self.exactly_once:
                # Fences any predecessor with this transactional.id and aborts its open
                # transaction before this instance reads a single offset.
                self._call(lambda: self.producer.init_transactions(30), "init_transactions", 30)
            self.consumer.subscribe(
                [self.topic],
                on_assign=self._guarded(self._on_assign),
                on_revoke=self._guarded(self._on_revoke),
                on_lost=self._guarded(self._on_lost),
            )
            log.info(
                "%s: %s from %s to %s, group %s",
                transactional_id(self.settings), self.settings.alerts.mode, self.topic,
                self.settings.topics.alerts, self.settings.alerts.group_id,
            )  # fmt: skip
            last_report = time.monotonic()
            while not stop.is_set():
                try:
                    self._step()
                except Abortable as exc:
                    self._abort_and_rewind(str(exc))
                if time.monotonic() - last_report >= 10:
                    last_report = time.monotonic()
                    log.info("progress: %s", self.totals)
            self._finish()
            log.info("stopped: %s", self.totals)
            return 0
        except Fatal as exc:
            self.dead = True
            what = "fenced by a newer instance" if exc.fenced else "fatal Kafka error"
            log.error("%s (%s): stopping, writing nothing more", what, exc)
            return EXIT_FENCED if exc.fenced else EXIT_FATAL
        except LeaseTaken as exc:
            self.dead = True
            log.error("fenced by a newer instance (%s): stopping, writing nothing more", exc)
            return EXIT_FENCED
        finally:
            self._close()
            self.watchdog.close()

    def _step(self) -> None:
        self._raise_pending()
        room = self.settings.alerts.transaction_max_messages - self.batch_records
        max_records = max(1, min(_MAX_BATCH, room))
        # consume(n, timeout) waits for n records or the whole timeout: wait for the first
        # one only (poll), then take what has already arrived. Records are processed, and
        # at least once their alerts sent, as they come, not at the end of a wait.
        first = self.consumer.poll(self._wait_s())
        msgs = [] if first is None else [first]
        if first is not None and max_records > 1:
            msgs += self.consumer.consume(max_records - 1, timeout=0)
        self._raise_pending()
        for msg in msgs:
            self._process(msg)
        if self.open and self._due():
            self._commit()

    def _wait_s(self) -> float:
        if not self.open:
            return _IDLE_POLL_S
        left = self.opened_at + self.settings.alerts.transaction_max_ms / 1000 - time.monotonic()
        return max(0.0, left)

    def _due(self) -> bool:
        s = self.settings
        return (
            self.batch_records >= s.alerts.transaction_max_messages
            or time.monotonic() - self.opened_at >= s.alerts.transaction_max_ms / 1000
        )

    def _process(self, msg: Any) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise Fatal(err)
            log.warning("consumer: %s", err)
            return
        state = self.states.get(msg.partition())
        if state is None:  # fetched before a revocation: no longer ours
            return
        if not self.open:
            self._begin()
        source = Source(msg.partition(), msg.offset(), msg.timestamp()[1])
        alerts = state.apply(self.rules, msg.value(), source)
        for alert in alerts:
            self._produce(alert)
        self.batch_records += 1
        self.batch_alerts += len(alerts)

    def _begin(self) -> None:
        if self.exactly_once:
            self._call(self.producer.begin_transaction, "begin_transaction", 30)
        self.open, self.opened_at = True, time.monotonic()
        self.batch_records = self.batch_alerts = 0

    def _produce(self, alert: Alert) -> None:
        while True:
            try:
                self.producer.produce(
                    self.settings.topics.alerts,
                    key=alert.alert_id.encode(),
                    value=alert.to_json(),
                    on_delivery=self._on_delivery,
                )
                return
            except BufferError:
                self.producer.poll(0.1)  # local queue full: let deliveries drain
            except KafkaException as exc:
                self._classify(exc.args[0])

    # --- commit, abort, rewind ----------------------------------------------------------

    def _commit(self) -> None:
        """Close the open batch: alerts and offsets together (or, at least once, in turn)."""
        if self.batch_alerts:
            self.alert_batches += 1
            self._maybe_crash()
        assignment = self.consumer.assignment()
        offsets = [tp for tp in self.consumer.position(assignment) if tp.offset >= 0]
        if self.exactly_once:
            self._call(
                lambda: self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), 30
                ),
                "send_offsets_to_transaction",
                30,
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
        self.open = False
        self.totals["records"] += self.batch_records
        self.totals["alerts"] += self.batch_alerts
        self.totals["commits"] += 1
        watchdog.committed()  # progress: the next hang starts a new row of restarts
        self.totals["restarts_in_a_row"] = 0

    def _flush_deliveries(self) -> None:
        self.failed_deliveries = 0
        if self.producer.flush(60) or self.failed_deliveries:
            # Some alerts may be lost: do not commit past their records, reprocess them.
            raise Abortable(f"{self.failed_deliveries} alert deliveries failed")

    def _maybe_crash(self) -> None:
        """Testing only (POS_ALERTS_CRASH_POINT): die or freeze with alerts produced and
        on the broker, the transaction still open."""
        if self.failpoints.is_armed("alerts.after_produce", self.alert_batches):
            self.producer.flush(30)
            self.failpoints.hit("alerts.after_produce", self.alert_batches)

    def _abort_and_rewind(self, why: str) -> None:
        log.warning("aborting the open transaction (%s); rewinding to the committed offsets", why)
        if self.exactly_once and self.open:
            self._abort()
        self.open = False
        self.totals["aborts"] += 1
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for tp in self._restore(self.consumer.committed(assignment, timeout=60)):
            self.consumer.seek(tp)

    def _abort(self) -> None:
        self._call(
            lambda: self.producer.abort_transaction(30), "abort_transaction", 30, abortable=False
        )

    def _finish(self) -> None:
        """On stop: commit the open batch, or abort it if it cannot commit."""
        if not self.open:
            return
        try:
            self._commit()
        except Abortable as exc:
            log.warning("could not commit on stop (%s): aborting", exc)
            if self.exactly_once:
                self._abort()
            self.open = False

    def _close(self) -> None:
        try:
            self.consumer.close()  # leaves the group; commits nothing (auto-commit is off)
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer: %s", exc)
        if not self.dead and not self.exactly_once:
            self.producer.flush(30)

    # --- rebalancing -----------------------------------------------------------------

    def _restore(self, committed: list[TopicPartition]) -> list[TopicPartition]:
        """Make each partition's state match its committed offset; where to start reading."""
        starts = []
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
            offset = tp.offset if tp.offset >= 0 else -1
            if tp.partition not in self.states or self.synced.get(tp.partition) != offset:
                t0 = time.monotonic()
                self.states[tp.partition] = restore.rebuild(
                    self.settings.bootstrap_servers,
                    self.topic,
                    tp.partition,
                    offset,
                    self.rules,
                    security=self.settings.kafka.security_config,
                )
                self.synced[tp.partition] = offset
                log.info(
                    "partition %d: state rebuilt from %d records below offset %d in %.2f s",
                    tp.partition, self.states[tp.partition].records, offset,
                    time.monotonic() - t0,
                )  # fmt: skip
            start = offset if offset >= 0 else OFFSET_BEGINNING
            starts.append(TopicPartition(self.topic, tp.partition, start))
        return starts

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        starts = self._restore(consumer.committed(partitions, timeout=60))
        consumer.assign(starts)
        log.info("assigned partitions %s", sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Commit what was processed while the partitions are still ours; the next owner
        # starts from there (its offset fetch waits for this transaction, KIP-447).
        if self.open and not self.dead:
            try:
                self._commit()
            except Abortable as exc:
                self._drop_open_batch(f"revoked mid-transaction: {exc}")
        log.info("revoked partitions %s", sorted(tp.partition for tp in partitions))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: our offsets can no longer be committed.
        if self.open and not self.dead:
            self._drop_open_batch("partitions lost")
        for tp in partitions:
            self.states.pop(tp.partition, None)
            self.synced.pop(tp.partition, None)

    def _drop_open_batch(self, why: str) -> None:
        log.warning("aborting the open transaction: %s", why)
        if self.exactly_once:
            self._abort()
        self.open = False
        self.totals["aborts"] += 1
        # Every state ran ahead of its committed offset: rebuild on the next assignment.
        self.synced.clear()

    def _guarded(
        self, callback: Callable[[Consumer, list[TopicPartition]], None]
    ) -> Callable[[Consumer, list[TopicPartition]], None]:
        """Rebalance callbacks run inside consume(): keep their errors for the loop."""

        def run(consumer: Consumer, partitions: list[TopicPartition]) -> None:
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
            log.warning("kafka: %s", err)

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.failed_deliveries += 1
            log.warning("alert not delivered: %s", err)

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
            log.error("%s; stop requested: exiting without commit", why)
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

    def _call(self, fn: Callable[[], T], what: str, timeout_s: float, abortable: bool = True) -> T:
        """Run a transactional call (given `timeout_s`), retrying retriable errors until the
        transaction would time out anyway. Raises Fatal, or Abortable (if `abortable`;
        else Fatal). A call still blocked `HANG_MARGIN_S` after its own timeout is hung:
        the watchdog restarts the instance (`_on_hang`)."""
        deadline = time.monotonic() + self.settings.alerts.transaction_timeout_ms / 1000
        delay = 0.1
        while True:
            try:
                with self.watchdog.guard(what, timeout_s + HANG_MARGIN_S):
                    return fn()
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                kind = classify(err)
                if kind == "retry" and time.monotonic() < deadline:
                    log.warning("%s: %s; retrying in %.1f s", what, err, delay)
                    # Backoff between retries of a failed call, not synchronisation.
                    time.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if kind in ("fenced", "fatal") or not (abortable and self.open):
                    raise Fatal(err) from exc
                # Abortable, or retried until the transaction would time out anyway.
                raise Abortable(f"{what}: {err}") from exc
