"""Cluster and security settings: what every client is given (no services)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pos_lambda.adapters import cassandra_client
from pos_lambda.adapters.spark_session import spark_conf
from pos_lambda.settings import Settings, is_loopback

SECURED = {
    "cassandra_username": "pos",
    "cassandra_password": "s3cret",
    "kafka_security_protocol": "SASL_PLAINTEXT",
    "kafka_sasl_username": "pos",
    "kafka_sasl_password": 'pa"ss',
}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("::", False),
        ("pos-serve", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_bind_host_without_auth_refuses_and_says_why() -> None:
    with pytest.raises(ValidationError) as err:
        Settings(bind_host="0.0.0.0")
    text = str(err.value)
    assert "reachable from other machines" in text
    assert "POS_CASSANDRA_USERNAME and POS_CASSANDRA_PASSWORD" in text
    assert "POS_KAFKA_SASL_USERNAME" in text
    assert "POS_BIND_HOST=127.0.0.1" in text


def test_non_loopback_bind_host_needs_both_cassandra_and_kafka_auth() -> None:
    only_cassandra = {k: v for k, v in SECURED.items() if k.startswith("cassandra")}
    with pytest.raises(ValidationError, match="POS_KAFKA_SASL_USERNAME"):
        Settings(bind_host="0.0.0.0", **only_cassandra)  # type: ignore[arg-type]
    # A SASL protocol without a password is not authentication either.
    half = SECURED | {"kafka_sasl_password": ""}
    with pytest.raises(ValidationError, match="POS_KAFKA_SASL_USERNAME"):
        Settings(bind_host="0.0.0.0", **half)  # type: ignore[arg-type]
    assert Settings(bind_host="0.0.0.0", **SECURED).bind_host == "0.0.0.0"  # type: ignore[arg-type]


def test_non_loopback_refusal_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POS_BIND_HOST", "0.0.0.0")
    with pytest.raises(ValidationError, match="refuses to start without authentication"):
        Settings()


def test_loopback_default_needs_no_auth_and_sends_none() -> None:
    s = Settings()
    assert s.bind_host == "127.0.0.1"
    assert s.kafka.security_config == {"security.protocol": "plaintext"}
    assert s.spark_kafka_options == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_kafka_sasl_reaches_librdkafka_and_spark() -> None:
    s = Settings(**SECURED)  # type: ignore[arg-type]
    assert s.kafka.security_config == {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "pos",
        "sasl.password": 'pa"ss',
    }
    opts = s.spark_kafka_options
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="pos" password="pa\\"ss";'
    )


def test_tls_trust_reaches_both_clients() -> None:
    s = Settings(
        **SECURED | {"kafka_security_protocol": "SASL_SSL", "kafka_ssl_ca_location": "/ca.pem"}
    )  # type: ignore[arg-type]
    assert s.kafka.security_config["ssl.ca.location"] == "/ca.pem"
    assert s.spark_kafka_options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert s.spark_kafka_options["kafka.ssl.truststore.type"] == "PEM"


def test_secrets_are_masked_when_settings_are_printed() -> None:
    dumped = Settings(**SECURED).model_dump(mode="json")  # type: ignore[arg-type]
    assert dumped["cassandra"]["password"] == "**********"
    assert dumped["kafka"]["sasl_password"] == "**********"
    assert "s3cret" not in repr(Settings(**SECURED))  # type: ignore[arg-type]


def _jar_cache(tmp_path: Path) -> Path:
    spark = tmp_path / "spark"
    spark.mkdir()
    for name in (
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
        "spark-cassandra-connector_2.12-3.5.1.jar",
        "delta-spark_2.12-3.3.2.jar",
    ):
        (spark / name).touch()
    return tmp_path


def test_spark_gets_cluster_endpoints_consistency_and_login(tmp_path: Path) -> None:
    s = Settings(
        jars_dir=_jar_cache(tmp_path),
        spark_master="spark://spark-master:7077",
        cassandra_hosts="cass-a,cass-b",
        cassandra_read_consistency="LOCAL_QUORUM",
        cassandra_write_consistency="EACH_QUORUM",
        cassandra_username="pos",
        cassandra_password="s3cret",
    )
    conf = spark_conf(s, "job")
    assert conf["spark.master"] == "spark://spark-master:7077"
    assert conf["spark.cassandra.connection.host"] == "cass-a,cass-b"
    assert conf["spark.cassandra.input.consistency.level"] == "LOCAL_QUORUM"
    assert conf["spark.cassandra.output.consistency.level"] == "EACH_QUORUM"
    assert conf["spark.cassandra.auth.username"] == "pos"
    assert conf["spark.cassandra.auth.password"] == "s3cret"
    # On a cluster the driver must be reachable by executors: no loopback pinning.
    assert "spark.driver.bindAddress" not in conf


def test_spark_sends_no_login_when_none_is_set(tmp_path: Path) -> None:
    conf = spark_conf(Settings(jars_dir=_jar_cache(tmp_path)), "job")
    assert not any(k.startswith("spark.cassandra.auth.") for k in conf)
    assert conf["spark.cassandra.input.consistency.level"] == "LOCAL_QUORUM"


def test_unknown_consistency_level_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(cassandra_read_consistency="LOCAL_SOMETIMES")  # type: ignore[arg-type]


def test_driver_sessions_get_login_levels_and_timeout() -> None:
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    s = Settings(
        cassandra_hosts="10.0.0.1, 10.0.0.2",
        cassandra_port=19042,
        cassandra_read_consistency="LOCAL_ONE",
        cassandra_write_consistency="LOCAL_QUORUM",
        cassandra_username="pos",
        cassandra_password="s3cret",
    )
    reads = cassandra_client.cluster(s, timeout=3.0)
    writes = cassandra_client.cluster(s, writes=True)
    try:
        read_profile = reads.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
        assert read_profile.consistency_level == ConsistencyLevel.LOCAL_ONE
        assert read_profile.request_timeout == 3.0
        assert reads.connect_timeout == 3.0
        assert reads.contact_points == ["10.0.0.1", "10.0.0.2"]
        assert reads.port == 19042
        assert isinstance(reads.auth_provider, PlainTextAuthProvider)
        assert reads.auth_provider.username == "pos"
        write_profile = writes.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
        assert write_profile.consistency_level == ConsistencyLevel.LOCAL_QUORUM
    finally:
        reads.shutdown()
        writes.shutdown()
    anonymous = cassandra_client.cluster(Settings())
    try:
        assert anonymous.auth_provider is None
    finally:
        anonymous.shutdown()


def test_local_runtime_refuses_a_non_loopback_bind_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pos_lambda_dev.runtime import cli

    for key, value in SECURED.items():
        monkeypatch.setenv(f"POS_{key.upper()}", value)
    monkeypatch.setenv("POS_BIND_HOST", "0.0.0.0")
    assert cli.main(["up"]) == 1
    assert "have no authentication, so they bind loopback only" in capsys.readouterr().err


def test_the_local_data_centre_reaches_the_connector_and_the_driver(tmp_path: Path) -> None:
    jars = _jar_cache(tmp_path)
    s = Settings(jars_dir=jars, cassandra_local_dc="eu-west")
    assert spark_conf(s, "job")["spark.cassandra.connection.localDC"] == "eu-west"
    assert "spark.cassandra.connection.localDC" not in spark_conf(Settings(jars_dir=jars), "job")
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    c = cassandra_client.cluster(s)
    try:
        policy = c.profile_manager.profiles[EXEC_PROFILE_DEFAULT].load_balancing_policy
        assert policy._child_policy.local_dc == "eu-west"
        assert c.protocol_version == 5
    finally:
        c.shutdown()


def test_a_silent_coordinator_is_bypassed_after_the_speculative_delay_unless_zero() -> None:
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.policies import (
        ConstantSpeculativeExecutionPolicy,
        NoSpeculativeExecutionPolicy,
    )

    speculating = cassandra_client.cluster(Settings(cassandra_speculative_delay_ms=120))
    never = cassandra_client.cluster(Settings(cassandra_speculative_delay_ms=0))
    try:
        policy = speculating.profile_manager.profiles[EXEC_PROFILE_DEFAULT]
        policy = policy.speculative_execution_policy
        assert isinstance(policy, ConstantSpeculativeExecutionPolicy)
        assert (policy.delay, policy.max_attempts) == (0.12, 2)
        off = never.profile_manager.profiles[EXEC_PROFILE_DEFAULT].speculative_execution_policy
        assert isinstance(off, NoSpeculativeExecutionPolicy)
    finally:
        speculating.shutdown()
        never.shutdown()


class _PreparingSession:
    """Stands in for a driver session: prepare() returns a statement object."""

    def prepare(self, query: str) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(query=query, is_idempotent=False)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT a FROM t WHERE k = ?",
        "INSERT INTO t (k, a) VALUES (?, ?)",
        "DELETE FROM t WHERE k = ?",
    ],
)
def test_reads_and_upserts_are_marked_safe_to_send_twice(query: str) -> None:
    assert cassandra_client.prepare_idempotent(_PreparingSession(), query).is_idempotent


@pytest.mark.parametrize(
    "query",
    [
        "UPDATE p SET commits = ? WHERE view_name = ? IF commits = ?",
        "INSERT INTO lease (k, owner) VALUES (?, ?) IF NOT EXISTS",
        "UPDATE c SET hits = hits + ? WHERE k = ?",
    ],
)
def test_a_lightweight_transaction_or_counter_is_never_marked_to_run_twice(query: str) -> None:
    with pytest.raises(ValueError, match="not idempotent"):
        cassandra_client.prepare_idempotent(_PreparingSession(), query)


@pytest.mark.parametrize(
    ("types", "twice_differs"),
    [
        (["bigint", "list<frozen<line_item>>"], True),
        (["list<text>"], True),
        (["frozen<list<text>>", "set<text>", "map<text, int>", "decimal"], False),
        ([], False),
    ],
)
def test_a_write_that_sets_a_non_frozen_list_is_not_sent_twice(
    types: list[str], twice_differs: bool
) -> None:
    assert cassandra_client.sets_a_list(types) is twice_differs
