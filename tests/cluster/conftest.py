"""Fixtures of the replicated-cluster tests: three KRaft brokers and three Cassandra
nodes on 127.0.0.1-3 (`pos-infra cluster up`, the same code), reused if they run.

Each test run gets its own keyspace at replication factor 3 and its own topic. The
cluster stays up afterwards, as the single node does; `pos-infra cluster down` stops it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters import schema_apply
from pos_lambda.settings import Settings, load_settings
from pos_lambda_dev.runtime import cluster, jars


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster-chaos-args",
        default="",
        help="arguments of the cluster chaos run (cluster_chaos.build_parser: --count, "
        "--rate, --down-seconds, ...)",
    )


HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The hook sees the whole session's items: mark only this directory's.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def layout() -> cluster.Layout:
    return cluster.Layout()


@pytest.fixture(scope="session")
def cluster_up(layout: cluster.Layout) -> Settings:
    """The cluster running with every node up (started, or restarted where a node is down)."""
    base = load_settings()
    jars.fetch(base)
    cluster.up(base, layout)
    return base


@pytest.fixture
def on_cluster(
    cluster_up: Settings, layout: cluster.Layout, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Settings that point every layer at the cluster: a keyspace of this test's own at
    replication factor 3, a topic of its own at replication factor 3, its own data dir."""
    tag = uuid.uuid4().hex[:10]
    s = cluster.client_settings(cluster_up, layout).with_overrides(
        cassandra_keyspace=f"pos_cluster_{tag}",
        topic_transactions=f"cluster.{tag}.transactions",
        topic_dead_letters=f"cluster.{tag}.dead_letters",
        data_dir=tmp_path_factory.mktemp("cluster-data"),
    )
    schema_apply.apply_cql(s)
    schema_apply.create_topics(s)
    yield s
    # Every node back for the next test, whatever this one stopped.
    cluster.up(cluster_up, layout)


def cql_session(settings: Settings, level: str, hosts: list[str] | None = None) -> Any:
    """A driver session on the test's keyspace whose reads run at `level`."""
    from pos_lambda.adapters import cassandra_client

    s = settings.with_overrides(cassandra_read_consistency=level)
    if hosts is not None:
        s = s.with_overrides(cassandra_hosts=",".join(hosts))
    return cassandra_client.cluster(s, timeout=30).connect(s.cassandra.keyspace)
