"""Apply the data contract to the running services: Cassandra keyspace and tables,
Kafka topics with explicit partition counts. Both steps are idempotent."""

from __future__ import annotations

from infra.process import ServiceError
from infra.settings import Settings


def apply_cql(settings: Settings, keyspace: str | None = None) -> int:
    """Create the keyspace, types and tables; returns the number of statements run."""
    from cassandra.cluster import Cluster, NoHostAvailable

    from schemas import cql

    ks = keyspace or settings.cassandra_keyspace
    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra_port)
    try:
        session = cluster.connect()
    except NoHostAvailable as exc:
        raise ServiceError(
            f"cannot reach Cassandra at {settings.cassandra_contact_points}:"
            f"{settings.cassandra_port}: is it running? try `make up` ({exc})"
        ) from exc
    try:
        statements = cql.ddl(ks, settings.cassandra_replication_factor)
        for stmt in statements:
            session.execute(stmt, timeout=60)
        return len(statements)
    finally:
        cluster.shutdown()


def pipeline_topics(settings: Settings) -> dict[str, int]:
    return {
        settings.topic_transactions: settings.topic_partitions,
        settings.topic_dead_letters: settings.topic_partitions,
        settings.topic_alerts: settings.topic_partitions,
    }


def create_topics(settings: Settings, topics: dict[str, int] | None = None) -> list[str]:
    """Create missing topics (name -> partitions; default: the pipeline's); returns those
    created. The one implementation lives in the Kafka adapter."""
    from infra import kafka_admin

    wanted = topics if topics is not None else pipeline_topics(settings)
    return kafka_admin.create_topics(
        settings.bootstrap_servers, wanted, settings.topic_replication_factor
    )
