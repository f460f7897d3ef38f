"""Whether the configured Kafka and Cassandra serve the pipeline: readiness probes for a
health check (`pos-provision ready kafka|cassandra`) and for the local runtime's start,
through the pipeline's own client settings (endpoints, logins)."""

from __future__ import annotations

from pos_lambda.settings import Settings


def kafka_ready(settings: Settings, timeout: float = 5.0) -> bool:
    """Metadata answers and a transactional producer can initialise (the transaction
    coordinator is loaded: what the alerts and receipts processors need first)."""
    from confluent_kafka import KafkaException

    from pos_lambda.adapters.kafka_clients import ConfluentClients

    clients = ConfluentClients.from_settings(settings)
    try:
        md = clients.admin().list_topics(timeout=timeout)
        if not md.brokers:
            return False
        # The processors' kind of producer; coordinator-loading retries are expected
        # while the broker warms up (the port's clients log at warning level only).
        producer = clients.transactional_producer("pos-infra-readiness-probe", 10000)
        producer.init_transactions(timeout)
        return True
    except KafkaException:
        return False


def cassandra_ready(settings: Settings, timeout: float = 5.0) -> bool:
    """CQL answers a query on the native port."""
    from pos_lambda.adapters import cassandra_client

    try:
        with cassandra_client.open_session(settings, keyspace=False, timeout=timeout) as session:
            session.execute("SELECT release_version FROM system.local", timeout=timeout)
        return True
    except Exception:  # NoHostAvailable, OperationTimedOut, OSError: not ready, whatever the cause
        return False
