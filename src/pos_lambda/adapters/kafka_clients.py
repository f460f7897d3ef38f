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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

    from pos_lambda.settings import Settings

ErrorCallback = Callable[["KafkaError"], None]
# librdkafka's own logging: errors only (the processes log what matters themselves).
_LOG_LEVEL = 3
# How often clients refresh topic metadata. librdkafka's default (5 minutes) left a grown
# input topic's new partitions unread by the processors, and a producer sending by the old
# partition count, for that long (transactional/layout.py).
METADATA_REFRESH_MS = 5000


class KafkaClients(Protocol):
    """What the pipeline's Kafka clients are built by (a real broker, or a fake)."""

    def group_consumer(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> Any:
        """A group member reading committed records from the earliest offset, no
        auto-commit; `instance_id` makes it a static member (KIP-345)."""
        ...

    def reader(self) -> Any:
        """A consumer outside any group: `assign()` only, read_committed, reports the end
        of a partition (`_PARTITION_EOF`), commits nothing."""
        ...

    def group_offsets_reader(self, group_id: str) -> Any:
        """A consumer that never subscribes: `committed()` gives `group_id`'s committed
        offsets and their metadata at once, open transactions or not."""
        ...

    def producer(self, *, idempotence: bool = True, error_cb: ErrorCallback | None = None) -> Any:
        """A producer: idempotent (acks=all) unless `idempotence` is off."""
        ...

    def transactional_producer(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        error_cb: ErrorCallback | None = None,
    ) -> Any:
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

    def admin(self) -> Any:
        """An AdminClient: topics, offsets by spec (`list_offsets`), group offsets."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.admin_config())

    def offsets_reader(self, group_id: str, **overrides: Any) -> Any:
        """A consumer of `offsets_reader_config`; `overrides` (e.g. a quieter
        `log_level`) win over it."""
        from confluent_kafka import Consumer

        return Consumer({**self.offsets_reader_config(group_id), **overrides})

    def group_consumer(
        self,
        group_id: str,
        *,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        partition_eof: bool = False,
    ) -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            self.group_consumer_config(
                group_id,
                instance_id=instance_id,
                session_timeout_ms=session_timeout_ms,
                partition_eof=partition_eof,
            )
        )

    def reader(self) -> Any:
        from confluent_kafka import Consumer

        return Consumer(self.reader_config())

    def group_offsets_reader(self, group_id: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer(self.group_offsets_reader_config(group_id))

    def producer(self, *, idempotence: bool = True, error_cb: ErrorCallback | None = None) -> Any:
        from confluent_kafka import Producer

        return Producer(_with_error_cb(self.producer_config(idempotence=idempotence), error_cb))

    def transactional_producer(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        error_cb: ErrorCallback | None = None,
    ) -> Any:
        from confluent_kafka import Producer

        config = self.transactional_producer_config(transactional_id, transaction_timeout_ms)
        return Producer(_with_error_cb(config, error_cb))


def _with_error_cb(config: dict[str, Any], error_cb: ErrorCallback | None) -> dict[str, Any]:
    return config if error_cb is None else {**config, "error_cb": error_cb}
