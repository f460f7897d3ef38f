"""Whether the configured Kafka and Cassandra serve the pipeline: readiness probes for a
health check (`pos-provision ready kafka|cassandra`) and for the local runtime's start,
through the pipeline's own client settings (endpoints, logins)."""

from __future__ import annotations

from pos_lambda.settings import Settings


def kafka_ready(settings: Settings, timeout: float = 5.0) -> bool:
    """Metadata answers and a transactional producer can initialise (the transaction
    coordinator is loaded: what the alerts and receipts processors need first)."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    client: dict[str, str | int | float | bool] = {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.kafka.security_config,
    }
    try:
        md = AdminClient(client).list_topics(timeout=timeout)
        if not md.brokers:
            return False
        producer = Producer(
            {
                **client,
                "transactional.id": "pos-infra-readiness-probe",
                "transaction.timeout.ms": 10000,
                # Coordinator-loading retries are expected while the broker warms up.
                "log_level": 2,
            }
        )
        producer.init_transactions(timeout)
        return True
    except KafkaException:
        return False


def cassandra_ready(settings: Settings, timeout: float = 5.0) -> bool:
    """CQL answers a query on the native port."""
    from pos_lambda.adapters import cassandra_client

    cluster = cassandra_client.cluster(settings, timeout=timeout)
    try:
        session = cluster.connect()
        session.execute("SELECT release_version FROM system.local", timeout=timeout)
        return True
    except Exception:  # NoHostAvailable, OperationTimedOut, OSError: not ready, whatever the cause
        return False
    finally:
        cluster.shutdown()
