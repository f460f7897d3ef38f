"""Session fixtures that start the real Kafka, Cassandra and Spark.

They go through the same code as `make up` (and reuse services that already run),
then isolate each test run: a fresh Cassandra keyspace per session, a fresh topic
per request. Nothing here is a fake.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pos_lambda.adapters import schema_apply
from pos_lambda.settings import Settings, load_settings
from pos_lambda_dev.runtime import cassandra_service, jars, kafka_service
from tests.integration.keyspace_pool import KeyspacePool


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def base_settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def services(base_settings: Settings) -> Settings:
    """Kafka and Cassandra running and ready: reused if they answer, else started here
    through the same code as `make up`."""
    jars.fetch(base_settings)
    for service in (kafka_service, cassandra_service):
        if not service.is_ready(base_settings):
            service.start(base_settings)
    return base_settings


@pytest.fixture(scope="session")
def settings(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings for this test session: its own keyspace (schema applied) and data dir.

    A continuous `pos-speed run` skips its drivers' warm-up here: it buys the first
    micro-batch's latency with 15-40 s of each driver's start, which these tests of
    correctness would pay at every start and restart. The warm-up has its own test
    (test_speed_layer.py's SIGTERM test turns it on), and the chaos and deploy runs keep it.
    """
    s = services.with_overrides(
        **{
            "cassandra_keyspace": _unique("pos_test"),
            "data_dir": tmp_path_factory.mktemp("data"),
            "speed_warm_up": False,
        }
    )
    schema_apply.apply_cql(s)
    return s


@pytest.fixture(scope="session")
def kafka_bootstrap(services: Settings) -> str:
    return services.bootstrap_servers


@pytest.fixture
def new_topic(settings: Settings) -> Callable[..., str]:
    """Factory: create a uniquely named topic with `partitions` partitions."""

    def make(partitions: int = 4, prefix: str = "test") -> str:
        name = _unique(f"{prefix}.pos")
        schema_apply.create_topics(settings, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def cql(settings: Settings) -> Iterator[Any]:
    """A cassandra-driver session bound to this test session's keyspace."""
    from cassandra.cluster import Cluster

    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
    session = cluster.connect(settings.cassandra.keyspace)
    yield session
    session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=60)
    cluster.shutdown()


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[Any]:
    """One local SparkSession for the whole test session (JVM start-up is slow)."""
    from pos_lambda.adapters.spark_session import build_session

    session = build_session(settings, "pos-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def keyspace_pool(services: Settings) -> Iterator[KeyspacePool]:
    pool = KeyspacePool(services)
    yield pool
    pool.close()


@pytest.fixture
def isolated(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Any, keyspace_pool: KeyspacePool
) -> Iterator[tuple[Settings, Any]]:
    """Settings with a keyspace of their own (empty, the schema applied), a fresh topic
    and data dir, and a CQL session on them.

    For tests that compare whole tables with a ledger and so must see only their own rows.
    The keyspace is lent by the session's pool (keyspace_pool.py): truncated after the
    test, not dropped, which saves some 6 s a test.
    """
    from cassandra.cluster import Cluster

    keyspace = keyspace_pool.borrow()
    s = settings.with_overrides(
        **{
            "cassandra_keyspace": keyspace,
            "topic_transactions": new_topic(partitions=4),
            "data_dir": tmp_path / "data",
        }
    )
    cluster = Cluster(s.cassandra_contact_points, port=s.cassandra.port)
    session = cluster.connect(keyspace)
    yield s, session
    cluster.shutdown()
    keyspace_pool.give_back(keyspace)
