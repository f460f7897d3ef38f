"""The local runtime really works: Kafka transactions, CQL, Spark with both connectors."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pos_lambda.adapters.java import find_java17
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import cassandra_service, kafka_service
from tests.integration.kafka_helpers import read_committed

pytestmark = pytest.mark.integration


def _read_committed(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    return [r.value for r in read_committed(bootstrap, topic, expect, timeout=30)]


def _transactional_producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    return p


def test_status_reports_both_services_ready(services: Settings) -> None:
    assert kafka_service.status(services).startswith("ready")
    assert cassandra_service.status(services).startswith("ready")


def test_kafka_storage_formats_with_a_kept_cluster_id_that_starts_with_a_dash(
    services: Settings, tmp_path: Path
) -> None:
    # One id in 64 starts with "-"; the storage tool once read it as an option (CI,
    # stop 39). Ids are no longer drawn so, but an older checkout may have kept one.
    settings = services.with_overrides(**{"state_dir": tmp_path})
    kp = kafka_service.paths(settings)
    kafka_service.write_config_files(settings, kp)
    kp.cluster_id.write_text("-ItMOSNxTLum2jPw_V2CJQ")

    kafka_service.format_storage(settings, find_java17(settings.java_home), kp)

    meta = (kp.data / "meta.properties").read_text().splitlines()
    assert "cluster.id=-ItMOSNxTLum2jPw_V2CJQ" in meta


def test_committed_transaction_is_visible_to_read_committed(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    p = _transactional_producer(kafka_bootstrap)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, key=str(i).encode(), value=f"committed-{i}".encode())
    p.commit_transaction(30)
    values = _read_committed(kafka_bootstrap, topic, expect=5)
    assert sorted(values) == [f"committed-{i}".encode() for i in range(5)]


def test_aborted_transaction_is_invisible_to_read_committed(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    p = _transactional_producer(kafka_bootstrap)
    p.begin_transaction()
    p.produce(topic, value=b"aborted-1")
    p.produce(topic, value=b"aborted-2")
    p.flush(30)  # the aborted records really reach the log before the abort
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"kept")
    p.commit_transaction(30)
    assert _read_committed(kafka_bootstrap, topic, expect=1) == [b"kept"]


def test_cql_write_read_round_trip(cql: Any) -> None:
    cql.execute("CREATE TABLE IF NOT EXISTS roundtrip (k text PRIMARY KEY, amount decimal)")
    key = uuid.uuid4().hex
    cql.execute("INSERT INTO roundtrip (k, amount) VALUES (%s, %s)", (key, Decimal("12.34")))
    row = cql.execute("SELECT amount FROM roundtrip WHERE k = %s", (key,)).one()
    assert row.amount == Decimal("12.34")


def test_spark_reads_kafka_and_round_trips_cassandra(
    spark: Any, settings: Settings, kafka_bootstrap: str, new_topic: Callable[..., str], cql: Any
) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(partitions=3)
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(30):
        p.produce(topic, key=f"k{i % 3}".encode(), value=f"{i}".encode())
    assert p.flush(30) == 0

    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    parsed = df.select(
        F.col("key").cast("string").alias("k"),
        F.col("value").cast("string").cast("int").alias("v"),
    )
    sums = {r.k: r.total for r in parsed.groupBy("k").agg(F.sum("v").alias("total")).collect()}
    # 0..29 split by i % 3: k0 = 0+3+...+27, k1 = 1+4+...+28, k2 = 2+5+...+29.
    assert sums == {"k0": 135, "k1": 145, "k2": 155}

    cql.execute(
        "CREATE TABLE IF NOT EXISTS spark_roundtrip "
        "(k text PRIMARY KEY, total bigint, at timestamp)"
    )
    # A long-lived session learns of new tables through debounced schema events.
    from pos_lambda.adapters.cassandra import await_tables

    await_tables(spark, settings.cassandra.keyspace, ["spark_roundtrip"])
    out = (
        parsed.groupBy("k")
        .agg(F.sum("v").alias("total"))
        .withColumn("at", F.lit(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)))
    )
    (
        out.write.format("org.apache.spark.sql.cassandra")
        .options(keyspace=settings.cassandra.keyspace, table="spark_roundtrip")
        .mode("append")
        .save()
    )
    back = (
        spark.read.format("org.apache.spark.sql.cassandra")
        .options(keyspace=settings.cassandra.keyspace, table="spark_roundtrip")
        .load()
        .collect()
    )
    assert {(r.k, r.total) for r in back} == {("k0", 135), ("k1", 145), ("k2", 155)}
    # Through the driver (naive UTC datetimes): the instant survived Spark -> Cassandra.
    rows = cql.execute("SELECT k, total, at FROM spark_roundtrip").all()
    assert sorted((r.k, r.total) for r in rows) == [("k0", 135), ("k1", 145), ("k2", 155)]
    assert {r.at for r in rows} == {datetime(2026, 1, 2, 3, 4, 5)}


def test_spark_python_workers_run_through_the_projects_daemon(spark: Any) -> None:
    """Every Python task runs in a worker of the project's daemon, which spares Python
    3.11 the re-read of Spark's zip archives before each task and collects only the young
    generations after it (infra/spark_python_daemon)."""
    from pyspark.sql import functions as F

    from pos_lambda.adapters.spark_python_daemon import (
        collects_young_generations,
        keeps_archive_directories,
    )

    kept = F.udf(lambda _: keeps_archive_directories(), "boolean")
    young = F.udf(lambda _: collects_young_generations(), "boolean")
    seen = spark.range(0, 8, numPartitions=4).select(kept("id"), young("id")).collect()
    assert [tuple(r) for r in seen] == [(True, True)] * 8


def test_the_driver_jvm_runs_the_throughput_collector_by_default(spark: Any) -> None:
    # POS_SPARK_DRIVER_JAVA_OPTIONS must reach the command line Spark's launcher starts
    # the driver's JVM with (a JVM's collector cannot change once it runs). The default
    # is the throughput collector, whose young and old generations are "PS Scavenge" and
    # "PS MarkSweep" (G1, the JVM's own default, has "G1 Young Generation" and "G1 Old
    # Generation").
    jvm = spark.sparkContext._jvm
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]


def test_cassandra_role_on_an_open_cluster_applies_the_schema_and_says_no_role_was_made(
    services: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """The local Cassandra runs AllowAllAuthenticator, where role passwords and grants
    are refused: compose's `cassandra-init` step must still leave the schema in place
    and say why it made no role, instead of failing on a CQL error."""
    import argparse

    from cassandra.cluster import Cluster

    from pos_lambda_dev.runtime.cli import cmd_cassandra_role

    keyspace = f"t_role_{uuid.uuid4().hex[:12]}"
    settings = services.with_overrides(cassandra_keyspace=keyspace)
    assert cmd_cassandra_role(settings, argparse.Namespace(role="pos")) == 0
    said = capsys.readouterr().err
    assert "does not authenticate (AllowAllAuthenticator), so no role was created" in said
    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
    try:
        session = cluster.connect()
        tables = {
            r.table_name
            for r in session.execute(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s",
                (keyspace,),
            )
        }
        assert {"receipts_by_store_day", "batch_runs"} <= tables
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    finally:
        cluster.shutdown()
