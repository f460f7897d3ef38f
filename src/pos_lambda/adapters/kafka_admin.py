"""Kafka topic admin, one implementation for every entry point (`pos-infra topics`,
`pos-producer`, `pos-speed`): create topics with explicit partition counts, and fail
with a message that says what to do when Kafka is unreachable or a topic is missing
(instead of a Java stack trace from Spark later).
"""

from __future__ import annotations

from collections.abc import Mapping

from pos_lambda.adapters.kafka_clients import ConfluentClients, KafkaAdmin
from pos_lambda.adapters.service import ServiceError

MISSING_TOPIC_HINT = "create it with `make topics` (or `pos-infra topics`)"


def _admin(bootstrap: str, security: Mapping[str, str] | None = None) -> KafkaAdmin:
    # `security`: Settings.kafka.security_config (SASL login, TLS), if any.
    return ConfluentClients(bootstrap, security or {}).admin()


def existing_topics(
    bootstrap: str, timeout_s: float = 10.0, security: Mapping[str, str] | None = None
) -> set[str]:
    from confluent_kafka import KafkaException

    try:
        return set(_admin(bootstrap, security).list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise ServiceError(
            f"cannot reach Kafka at {bootstrap}: is it running? try `make up` ({exc})"
        ) from exc


def topic_config(replication_factor: int) -> dict[str, str]:
    """A replicated topic acknowledges a write (acks=all, as every producer here uses) once
    two replicas hold it, so one broker lost loses nothing and one broker down stops
    nothing. Below 3 replicas, or at the broker's default (-1), the broker decides."""
    return {"min.insync.replicas": "2"} if replication_factor >= 3 else {}


def create_topics(
    bootstrap: str,
    topics: dict[str, int],
    replication_factor: int = -1,
    security: Mapping[str, str] | None = None,
) -> list[str]:
    """Create the missing ones of `topics` (name -> partitions); returns those created.

    replication_factor -1 means the broker's default.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    existing = existing_topics(bootstrap, security=security)
    new = [
        NewTopic(
            t,
            num_partitions=n,
            replication_factor=replication_factor,
            config=topic_config(replication_factor),
        )
        for t, n in topics.items()
        if t not in existing
    ]
    if not new:
        return []
    admin = _admin(bootstrap, security)  # keep the client alive until the futures resolve
    futures = admin.create_topics(new, operation_timeout=30)
    created = []
    for topic, future in futures.items():
        try:
            future.result()
            created.append(topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ServiceError(f"could not create topic '{topic}': {exc}") from exc
    return created


def require_topic(
    bootstrap: str,
    topic: str,
    create_partitions: int | None = None,
    replication_factor: int = -1,
    timeout_s: float = 10.0,
    hint: str = MISSING_TOPIC_HINT,
    security: Mapping[str, str] | None = None,
) -> None:
    """Return if `topic` exists (or was created with `create_partitions`), else say why."""
    if topic in existing_topics(bootstrap, timeout_s, security):
        return
    if create_partitions is None:
        raise ServiceError(f"topic '{topic}' does not exist on {bootstrap}: {hint}")
    create_topics(bootstrap, {topic: create_partitions}, replication_factor, security)
