"""How a transactional processor makes a batch's outputs and input offsets durable: the
two modes of `..._MODE` (transactional/processor.py), one class each.

- `ExactlyOnce`: a Kafka transaction per batch, holding the outputs and the consumer's
  positions (`send_offsets_to_transaction` with the group's metadata, KIP-447).
- `AtLeastOnce` (for comparison only): no transaction; the outputs are flushed, then the
  offsets committed. A crash between the two re-emits the outputs of the records since
  the last commit (same keys).

A committer makes the calls; what a failed call means is the life cycle's decision
(transactional/lifecycle.py). Calls go through the shell's `call`, which retries
retriable errors, guards against hangs and raises `CallFailed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from confluent_kafka import TopicPartition

from pos_lambda.adapters.kafka_clients import KafkaConsumer, KafkaProducer
from pos_lambda.transactional.lifecycle import Call, ErrorKind

T = TypeVar("T")

# send_offsets_to_transaction's own timeout. It reaches the group and transaction
# coordinators; when one of them dies the call hangs past it (librdkafka#5456), so this
# plus the shell's HANG_MARGIN_S is how long a coordinator's death stops a processor
# before its watchdog restarts it. A call that times out in earnest is retried.
SEND_OFFSETS_TIMEOUT_S = 10.0


class CallRunner(Protocol):
    """The shell's `_call`: `fn` with retries and a hang guard; raises CallFailed."""

    def __call__(
        self, fn: Callable[[], T], what: str, timeout_s: float, patience_s: float | None = None
    ) -> T: ...


class Committer(Protocol):
    producer: KafkaProducer

    def start(self) -> None:
        """Before the first record is read."""
        ...

    def begin(self) -> None: ...

    def commit(self, offsets: list[TopicPartition]) -> None:
        """The open batch's outputs and `offsets`, durable."""
        ...

    def abort(self) -> None: ...

    def produce_error(self, kind: ErrorKind) -> ErrorKind | None:
        """What a produce() error of `kind` means here (None: not one the shell handles)."""
        ...

    def close(self, dead: bool) -> None:
        """After the consumer left the group (`dead`: after a fatal error)."""
        ...


class ExactlyOnce:
    def __init__(
        self,
        producer: KafkaProducer,
        consumer: KafkaConsumer,
        call: CallRunner,
        coordinator_wait_s: float,
    ) -> None:
        self.producer, self.consumer, self.call = producer, consumer, call
        self.coordinator_wait_s = coordinator_wait_s

    def start(self) -> None:
        # Fences any predecessor with this transactional.id and aborts its open
        # transaction before this instance reads a single offset.
        self.call(
            lambda: self.producer.init_transactions(30),
            Call.INIT,
            30,
            patience_s=self.coordinator_wait_s,
        )

    def begin(self) -> None:
        self.call(self.producer.begin_transaction, Call.BEGIN, 30)

    def commit(self, offsets: list[TopicPartition]) -> None:
        self.call(
            lambda: self.producer.send_offsets_to_transaction(
                offsets, self.consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S
            ),
            Call.SEND_OFFSETS,
            SEND_OFFSETS_TIMEOUT_S,
        )
        self.call(lambda: self.producer.commit_transaction(60), Call.COMMIT_TRANSACTION, 60)

    def abort(self) -> None:
        # A timed-out abort is retriable ("retry call to resume"), and so is a coordinator
        # still completing the previous transaction: wait for it, do not exit.
        self.call(
            lambda: self.producer.abort_transaction(30),
            Call.ABORT,
            30,
            patience_s=self.coordinator_wait_s,
        )

    def produce_error(self, kind: ErrorKind) -> ErrorKind | None:
        # A record the transaction cannot take (its state broken, the record refused):
        # retriable or not, the life cycle aborts and replays from the committed offsets.
        return kind

    def close(self, dead: bool) -> None:
        pass  # an open transaction is the broker's to abort (or the next instance's)


class AtLeastOnce:
    def __init__(
        self,
        producer: KafkaProducer,
        consumer: KafkaConsumer,
        call: CallRunner,
        flush: Callable[[], None],
    ) -> None:
        self.producer, self.consumer, self.call = producer, consumer, call
        self.flush = flush  # every output delivered, or CallFailed

    def start(self) -> None:
        pass

    def begin(self) -> None:
        pass

    def commit(self, offsets: list[TopicPartition]) -> None:
        self.flush()
        if offsets:
            self.call(
                lambda: self.consumer.commit(offsets=offsets, asynchronous=False), Call.COMMIT, 60
            )

    def abort(self) -> None:
        pass  # nothing to take back: the replay re-emits the same keys

    def produce_error(self, kind: ErrorKind) -> ErrorKind | None:
        return None if kind in (ErrorKind.RETRY, ErrorKind.FAIL) else kind

    def close(self, dead: bool) -> None:
        if not dead:
            self.producer.flush(30)
