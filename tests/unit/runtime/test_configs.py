"""Pure rendering of the local runtime's configuration (no services)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pos_lambda.adapters.spark_session import spark_conf
from pos_lambda.settings import Settings, load_settings
from pos_lambda_dev.runtime import cassandra_service, kafka_service


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_kafka_binds_loopback_and_single_node_internal_topics(tmp_path: Path) -> None:
    props = _props(kafka_service.render_server_properties(Settings(), tmp_path))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path)


def test_kafka_ports_are_configurable(tmp_path: Path) -> None:
    s = Settings(kafka_port=19092, kafka_controller_port=19093)
    props = _props(kafka_service.render_server_properties(s, tmp_path))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert s.bootstrap_servers == "127.0.0.1:19092"


def test_cassandra_yaml_binds_loopback_with_configured_ports(tmp_path: Path) -> None:
    yaml = cassandra_service.render_cassandra_yaml(Settings(cassandra_port=19042), tmp_path)
    assert "listen_address: 127.0.0.1\n" in yaml
    assert "rpc_address: 127.0.0.1\n" in yaml
    assert "native_transport_port: 19042\n" in yaml
    assert f"data_file_directories: [{tmp_path / 'data'}]" in yaml


def test_cassandra_jvm_options_have_jamm_agent_and_jdk17_opens(tmp_path: Path) -> None:
    opts = cassandra_service.jvm_options(Settings(), tmp_path, Path("/jars/jamm-0.4.0.jar"))
    assert "-javaagent:/jars/jamm-0.4.0.jar" in opts
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in opts
    assert "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED" in opts
    assert "-Xmx1G" in opts


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POS_KAFKA_BOOTSTRAP_SERVERS", "broker-a:9092,broker-b:9092")
    monkeypatch.setenv("POS_CASSANDRA_HOSTS", "cass-a, cass-b")
    monkeypatch.setenv("POS_SPARK_MASTER", "spark://master:7077")
    s = load_settings()
    assert s.bootstrap_servers == "broker-a:9092,broker-b:9092"
    assert s.cassandra_contact_points == ["cass-a", "cass-b"]
    assert s.spark.master == "spark://master:7077"


def test_settings_reject_bad_values_with_field_name() -> None:
    with pytest.raises(ValidationError, match="kafka_port"):
        Settings(kafka_port=70000)
    with pytest.raises(ValidationError, match="cassandra_keyspace"):
        Settings(cassandra_keyspace="Bad-Name")


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Settings().kafka.port = 1  # type: ignore[misc]


def _fake_jar_cache(root: Path) -> Path:
    spark = root / "spark"
    spark.mkdir(parents=True)
    for name in (
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
        "spark-cassandra-connector_2.12-3.5.1.jar",
        "delta-spark_2.12-3.3.2.jar",
    ):
        (spark / name).write_bytes(b"")
    return root


def test_spark_conf_local_mode(tmp_path: Path) -> None:
    jars = _fake_jar_cache(tmp_path)
    conf = spark_conf(Settings(jars_dir=jars), "job")
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.cassandra.connection.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert sorted(Path(j).name for j in conf["spark.jars"].split(",")) == [
        "delta-spark_2.12-3.3.2.jar",
        "spark-cassandra-connector_2.12-3.5.1.jar",
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
    ]
    assert conf["spark.sql.extensions"] == (
        "com.datastax.spark.connector.CassandraSparkExtensions,"
        "io.delta.sql.DeltaSparkSessionExtension"
    )
    assert conf["spark.sql.catalog.spark_catalog"].endswith("DeltaCatalog")
    # Room for every generated class of a micro-batch (Spark's default is 100).
    assert int(conf["spark.sql.codegen.cache.maxEntries"]) >= 1000
    # Delta's state rebuilt in a few tasks, not its default 50, on one machine.
    assert conf["spark.databricks.delta.snapshotPartitions"] == "4"
    wide = spark_conf(Settings(jars_dir=jars, spark_delta_snapshot_partitions=64), "job")
    assert wide["spark.databricks.delta.snapshotPartitions"] == "64"
    # Python workers started by the project's daemon (run by Spark as `python -m`).
    assert conf["spark.python.daemon.module"] == "pos_lambda.adapters.spark_python_daemon"
    pyspark_own = spark_conf(
        Settings(jars_dir=jars, spark_python_daemon_module="pyspark.daemon"), "j"
    )
    assert pyspark_own["spark.python.daemon.module"] == "pyspark.daemon"
    # DataFrames from pandas through Arrow (local relations), never silently without it.
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.sql.execution.arrow.pyspark.fallback.enabled"] == "false"
    # The driver's JVM: the project's log configuration, then the throughput collector;
    # with the options emptied, the log configuration alone (the JVM picks G1).
    options = conf["spark.driver.extraJavaOptions"].split(" ")
    assert options[0].startswith("-Dlog4j.configurationFile=")
    assert options[1:] == ["-XX:+UseParallelGC"]
    bare = spark_conf(Settings(jars_dir=jars, spark_driver_java_options=""), "j")
    assert bare["spark.driver.extraJavaOptions"] == options[0]
    # The class archive's options (src/pos_lambda/adapters/spark_class_archive.py) come last.
    archived = spark_conf(Settings(jars_dir=jars), "j", ("-XX:SharedArchiveFile=/a.jsa",))
    assert archived["spark.driver.extraJavaOptions"].split(" ")[1:] == [
        "-XX:+UseParallelGC",
        "-XX:SharedArchiveFile=/a.jsa",
    ]


def test_spark_conf_cluster_mode_keeps_driver_binding_default(tmp_path: Path) -> None:
    s = Settings(
        jars_dir=_fake_jar_cache(tmp_path), spark_master="spark://m:7077", cassandra_hosts="c1,c2"
    )
    conf = spark_conf(s, "job")
    assert conf["spark.master"] == "spark://m:7077"
    assert "spark.driver.bindAddress" not in conf
    assert conf["spark.cassandra.connection.host"] == "c1,c2"


def test_spark_conf_without_jars_says_run_make_jars(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="make jars"):
        spark_conf(Settings(jars_dir=tmp_path), "job")


def test_the_speed_queries_run_in_fair_pools_of_their_own(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from pos_lambda.speed_layer import archiver_job, views_job

    conf = spark_conf(Settings(jars_dir=_fake_jar_cache(tmp_path)), "job")
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = {
        p.get("name"): {c.tag: c.text for c in p}
        for p in ET.parse(conf["spark.scheduler.allocation.file"]).getroot()
    }
    # Each query starts in the pool named after it (src/pos_lambda/speed_layer/triggers.py).
    assert set(pools) == {views_job.QUERY_NAME, archiver_job.QUERY_NAME}
    # The views query, which users wait on, gets its cores first.
    views, archiver = pools[views_job.QUERY_NAME], pools[archiver_job.QUERY_NAME]
    assert views["minShare"] == "2"
    assert int(views["weight"]) > int(archiver["weight"])


def test_a_cluster_node_replicates_internal_topics_and_never_elects_an_unclean_leader(
    tmp_path: Path,
) -> None:
    from pos_lambda_dev.runtime import cluster

    nodes = cluster.kafka_nodes(cluster.Layout())
    assert [n.host for n in nodes] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    props = _props(kafka_service.render_node_properties(nodes[1], tmp_path, 4))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:19093,2@127.0.0.2:19093,3@127.0.0.3:19093"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.2:19092,CONTROLLER://127.0.0.2:19093"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["broker.session.timeout.ms"] == "3000"
    # The single node keeps replication factor 1 everywhere.
    alone = _props(kafka_service.render_server_properties(Settings(), tmp_path))
    assert alone["min.insync.replicas"] == "1"
    assert alone["default.replication.factor"] == "1"
    assert "broker.session.timeout.ms" not in alone


def test_a_cluster_cassandra_node_has_its_own_address_one_token_and_quick_conviction(
    tmp_path: Path,
) -> None:
    from pos_lambda_dev.runtime import cluster

    nodes = cluster.cassandra_nodes(cluster.Layout())
    assert [n.jmx_port for n in nodes] == [17199, 17299, 17399]
    assert [n.initial_token for n in nodes] == [
        -9223372036854775808,
        -3074457345618258603,
        3074457345618258602,
    ]
    yaml = cassandra_service.render_node_yaml(nodes[2], tmp_path)
    assert "listen_address: 127.0.0.3\n" in yaml
    assert "native_transport_port: 19042\n" in yaml
    assert "storage_port: 17000\n" in yaml
    assert 'seeds: "127.0.0.1:17000,127.0.0.2:17000,127.0.0.3:17000"' in yaml
    assert "num_tokens: 1\ninitial_token: 3074457345618258602\n" in yaml
    assert "phi_convict_threshold: 5\n" in yaml
    assert "auto_bootstrap: false\n" in yaml
    opts = cassandra_service.node_jvm_options(nodes[2], tmp_path, Path("/j/jamm.jar"))
    assert "-Dcassandra.jmx.local.port=17399" in opts
    # Durable system tables: a node killed -9 must come back with its schema.
    assert "-Dcassandra.unsafesystem=true" not in opts
    assert "-Xmx512M" in opts
    # The single node keeps its vnodes.
    alone = cassandra_service.render_cassandra_yaml(Settings(), tmp_path)
    assert "num_tokens: 16\n" in alone and "phi_convict_threshold" not in alone


def test_the_cluster_is_reached_by_settings_alone() -> None:
    from pos_lambda_dev.runtime import cluster

    on_cluster = cluster.client_settings(Settings(), cluster.Layout())
    assert on_cluster.bootstrap_servers == "127.0.0.1:19092,127.0.0.2:19092,127.0.0.3:19092"
    assert on_cluster.cassandra_contact_points == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert on_cluster.cassandra.port == 19042
    assert on_cluster.topics.replication_factor == 3
    assert on_cluster.cassandra.replication_factor == 3
    assert cluster.shell_exports(cluster.Layout()).splitlines()[0] == (
        "export POS_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092,127.0.0.2:19092,127.0.0.3:19092"
    )


def test_replicated_topics_acknowledge_at_two_in_sync_replicas() -> None:
    from pos_lambda.adapters.kafka_admin import topic_config

    assert topic_config(3) == {"min.insync.replicas": "2"}
    assert topic_config(1) == {}
    assert topic_config(-1) == {}


def test_the_keyspace_uses_network_topology_at_the_configured_factor() -> None:
    from pos_lambda.schemas import cql

    assert cql.keyspace_ddl("pos", 3) == (
        "CREATE KEYSPACE IF NOT EXISTS pos WITH replication = "
        "{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}"
    )


def test_lightweight_transactions_and_the_audit_have_their_own_levels() -> None:
    s = Settings()
    assert s.cassandra.serial_consistency == "LOCAL_SERIAL"
    assert s.cassandra.audit_consistency == "ALL"
    with pytest.raises(ValidationError):
        Settings(cassandra_serial_consistency="QUORUM")


def test_driver_sessions_run_lightweight_transactions_at_the_serial_level() -> None:
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    from pos_lambda.adapters import cassandra_client

    built = cassandra_client.cluster(Settings(cassandra_serial_consistency="SERIAL"))
    profile = built.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
    assert profile.serial_consistency_level == ConsistencyLevel.SERIAL
    assert profile.consistency_level == ConsistencyLevel.LOCAL_QUORUM
