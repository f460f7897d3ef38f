"""The Kafka port: every confluent-kafka client the pipeline's processes build, from one
place.

Each kind of client the project uses has one method here, and its configuration one
`*_config` method (pure: a dict), so security (SASL, TLS), idempotence, isolation and
timeouts are decided once:

- `group_consumer`: a member of a consumer group that reads only committed records
  (`read_committed`) and never auto-commits: the processors, the alerts sink;
- `group_offsets_reader`: a consumer that never joins its group and reads the group's
  committed offsets as they are, without waiting for open transactions (KIP-447's
  require_stable off): a processor's view of the partitions other members own;
- `reader`: a consumer outside any group (`assign()` only, never commits) that reads
  committed records to the end of a partition: state rebuilds, audits;
- `producer`: the idempotent producer (the simulator, replays);
- `transactional_producer`: the processors' producer (`transactional.id`, KIP-447);
- `offsets_reader` and `admin` (the real adapter's only): the log's ends and groups'
  committed offsets for the audit, the metrics and the archive's lag; topic admin and
  readiness probes.

`ConfluentClients` is the real adapter. Unit tests pass an in-memory broker that
implements the same methods (tests/support/memory_kafka.py), which can also inject the
errors a real broker raises rarely (abortable transactions, fencing, rebalances, hangs).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, TopicPartition

    from pos_lambda.settings import Settings

ErrorCallback = Callable[["KafkaError"], None]
# librdkafka's own logging: errors only (the processes log what matters themselves).
_LOG_LEVEL = 3
# How often clients refresh topic metadata. librdkafka's default (5 minutes) left a grown
# input topic's new partitions unread by the processors, and a producer sending by the old
# partition count, for that long (transactional/layout.py).
METADATA_REFRESH_MS = 5000


# --- the clients' surfaces ------------------------------------------------------------
# What the project calls on the clients the port builds, typed: confluent-kafka's classes
# and the unit tests' in-memory broker (tests/support/memory_kafka.py) both satisfy these
# Protocols, and mypy checks both (`make check`). Only the calls the project makes are
# here; a call that is missing is a type error, so a fake cannot fall behind unnoticed.

# Record headers as confluent-kafka returns them (a list of pairs, or a dict).
Headers = Sequence[tuple[str, "str | bytes | None"]] | Mapping[str, "str | bytes | None"]
# The opaque handle of `consumer_group_metadata()`, passed on to
# `send_offsets_to_transaction` (librdkafka's ConsumerGroupMetadata; a fake has its own).
GroupMetadata = Any


class KafkaMessage(Protocol):
    """A record, or an event (`error()` set: end of partition, a fatal error)."""

    def error(self) -> KafkaError | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> Headers | None: ...


DeliveryCallback = Callable[["KafkaError | None", KafkaMessage], None]
RebalanceCallback = Callable[[Any, list["TopicPartition"]], None]


class PartitionMetadata(Protocol):
    @property
    def leader(self) -> int: ...


class TopicMetadata(Protocol):
    @property
    def error(self) -> KafkaError | None: ...
    @property
    def partitions(self) -> Mapping[int, Any]: ...


class ClusterMetadata(Protocol):
    """`list_topics()`'s answer: the topics asked for (all without a name) and the
    brokers."""

    @property
    def topics(self) -> Mapping[str, TopicMetadata]: ...
    @property
    def brokers(self) -> Mapping[int, Any]: ...


class KafkaConsumer(Protocol):
    """A consumer: a group member (`subscribe`) or a reader (`assign`)."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = ...,
        on_revoke: RebalanceCallback | None = ...,
        on_lost: RebalanceCallback | None = ...,
    ) -> None: ...
    def poll(self, timeout: float = ...) -> KafkaMessage | None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> Sequence[KafkaMessage]: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def unassign(self) -> None: ...
    def assignment(self) -> list[TopicPartition]: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def committed(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...
    @overload
    def commit(self, *, asynchronous: Literal[False]) -> list[TopicPartition] | None: ...
    @overload
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition] | None: ...
    def consumer_group_metadata(self) -> GroupMetadata: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> ClusterMetadata: ...
    def close(self) -> None: ...


class KafkaOffsetsReader(KafkaConsumer, Protocol):
    """The real adapter's `offsets_reader`: a consumer that also finds offsets by time."""

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...


class KafkaProducer(Protocol):
    """A producer, idempotent or transactional."""

    def produce(
        self,
        topic: str,
        *,
        value: bytes | None = ...,
        key: bytes | None = ...,
        partition: int = ...,
        on_delivery: DeliveryCallback | None = ...,
        timestamp: int = ...,
        headers: list[tuple[str, str | bytes | None]] | None = ...,
    ) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...
    def init_transactions(self, timeout: float = ...) -> None: ...
    def begin_transaction(self) -> None: ...
    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: GroupMetadata, timeout: float = ...
    ) -> None: ...
    def commit_transaction(self, timeout: float = ...) -> None: ...
    def abort_transaction(self, timeout: float = ...) -> None: ...
    def __len__(self) -> int: ...


class KafkaAdmin(Protocol):
    """An admin client (the real adapter's only): each request answers with futures."""

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> ClusterMetadata: ...
    def create_topics(self, new_topics: list[Any], **kwargs: Any) -> dict[str, Future[Any]]: ...
    def delete_topics(self, topics: list[str], **kwargs: Any) -> dict[str, Future[Any]]: ...
    def delete_consumer_groups(
        self, group_ids: list[str], **kwargs: Any
    ) -> dict[str, Future[Any]]: ...
    def alter_consumer_group_offsets(
        self, alter_consumer_group_offsets_request: list[Any], **kwargs: Any
    ) -> dict[str, Future[Any]]: ...
    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, Any], **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]: ...


class KafkaClients(Protocol):
    """What the pipeline's Kafka clients are built by (a real broker, or a fake)."""

    def group_consumer(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> KafkaConsumer:
        """A group member reading committed records from the earliest offset, no
        auto-commit; `instance_id` makes it a static member (KIP-345)."""
        ...

    def reader(self) -> KafkaConsumer:
        """A consumer outside any group: `assign()` only, read_committed, reports the end
        of a partition (`_PARTITION_EOF`), commits nothing."""
        ...

    def group_offsets_reader(self, group_id: str) -> KafkaConsumer:
        """A consumer that never subscribes: `committed()` gives `group_id`'s committed
        offsets and their metadata at once, open transactions or not."""
        ...

    def producer(
        self, *, idempotence: bool = True, error_cb: ErrorCallback | None = None
    ) -> KafkaProducer:
        """A producer: idempotent (acks=all) unless `idempotence` is off."""
        ...

    def transactional_producer(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        error_cb: ErrorCallback | None = None,
    ) -> KafkaProducer:
        """An idempotent producer with `transactional.id` (init_transactions fences any
        predecessor with the same id)."""
        ...


@dataclass(frozen=True)
class ConfluentClients:
    """The real adapter: confluent-kafka (librdkafka) clients of one cluster."""

    bootstrap_servers: str
    security: Mapping[str, str] = field(default_factory=dict)
    linger_ms: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> ConfluentClients:
        return cls(settings.bootstrap_servers, settings.kafka.security_config)

    # --- configuration (pure) ---------------------------------------------------------

    def base_config(self) -> dict[str, Any]:
        return {
            **self.security,
            "bootstrap.servers": self.bootstrap_servers,
            "log_level": _LOG_LEVEL,
            "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
        }

    def group_consumer_config(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> dict[str, Any]:
        config = {
            **self.base_config(),
            "group.id": group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": partition_eof,
        }
        if instance_id is not None:
            # Static membership (KIP-345): a restarted member (same id) takes its
            # partitions back at once instead of waiting out its predecessor's session.
            # The price: a stopped member's partitions wait session.timeout.ms before they
            # move to the others (a static member does not leave the group on close).
            config["group.instance.id"] = instance_id
        if session_timeout_ms is not None:
            config["session.timeout.ms"] = session_timeout_ms
        return config

    def reader_config(self) -> dict[str, Any]:
        return {
            **self.base_config(),
            # Required by the client, never used: assign() only, no commits.
            "group.id": f"pos-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }

    def offsets_reader_config(self, group_id: str) -> dict[str, Any]:
        """A consumer that never subscribes (so never joins `group_id`): it reads the
        group's committed offsets and the log's end as read_committed readers see it."""
        return {
            **self.base_config(),
            "group.id": group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }

    def group_offsets_reader_config(self, group_id: str) -> dict[str, Any]:
        return {
            **self.base_config(),
            "group.id": group_id,
            "enable.auto.commit": False,
            # read_committed makes committed() wait for transactions holding offsets
            # (require_stable); the last committed offsets are what the caller wants.
            "isolation.level": "read_uncommitted",
        }

    def producer_config(self, *, idempotence: bool = True) -> dict[str, Any]:
        return {
            **self.base_config(),
            # PID + sequence numbers: a retried batch is written once, in order.
            "enable.idempotence": idempotence,
            "acks": "all",
            "linger.ms": self.linger_ms,
            # JSON receipts: about a third of their size on the wire and on disk.
            "compression.type": "lz4",
        }

    def transactional_producer_config(
        self, transactional_id: str, transaction_timeout_ms: int
    ) -> dict[str, Any]:
        return {
            **self.producer_config(idempotence=True),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms,
        }

    def admin_config(self) -> dict[str, Any]:
        # log_level 2: librdkafka's own connection-refused lines would bury the caller's
        # message (every caller says what to do when Kafka does not answer).
        return {**self.security, "bootstrap.servers": self.bootstrap_servers, "log_level": 2}

    # --- clients ----------------------------------------------------------------------

    def admin(self) -> KafkaAdmin:
        """An AdminClient: topics, offsets by spec (`list_offsets`), group offsets."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.admin_config())

    def offsets_reader(self, group_id: str, **overrides: Any) -> KafkaOffsetsReader:
        """A consumer of `offsets_reader_config`; `overrides` (e.g. a quieter
        `log_level`, or a `logger` for librdkafka's lines) win over it."""
        from confluent_kafka import Consumer

        return Consumer({**self.offsets_reader_config(group_id), **overrides})

    def group_consumer(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> KafkaConsumer:
        from confluent_kafka import Consumer

        return Consumer(
            self.group_consumer_config(
                group_id,
                instance_id=instance_id,
                session_timeout_ms=session_timeout_ms,
                partition_eof=partition_eof,
            )
        )

    def reader(self) -> KafkaConsumer:
        from confluent_kafka import Consumer

        return Consumer(self.reader_config())

    def group_offsets_reader(self, group_id: str) -> KafkaConsumer:
        from confluent_kafka import Consumer

        return Consumer(self.group_offsets_reader_config(group_id))

    def producer(
        self,
        *,
        idempotence: bool = True,
        error_cb: ErrorCallback | None = None,
        **overrides: Any,
    ) -> KafkaProducer:
        """`overrides` (e.g. a `logger` for librdkafka's lines) win over the
        configuration."""
        from confluent_kafka import Producer

        config = _with_error_cb(self.producer_config(idempotence=idempotence), error_cb)
        return Producer({**config, **overrides})

    def transactional_producer(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        error_cb: ErrorCallback | None = None,
    ) -> KafkaProducer:
        from confluent_kafka import Producer

        config = self.transactional_producer_config(transactional_id, transaction_timeout_ms)
        return Producer(_with_error_cb(config, error_cb))


def _with_error_cb(config: dict[str, Any], error_cb: ErrorCallback | None) -> dict[str, Any]:
    return config if error_cb is None else {**config, "error_cb": error_cb}
