"""The local Spark standalone cluster's command lines and environment (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pos_lambda.adapters.service import ServiceError
from pos_lambda.adapters.spark_session import on_this_machine, spark_conf
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import spark_service

HOME = Path("/opt/pyspark")


def test_daemons_bind_loopback_with_the_configured_ports(tmp_path: Path) -> None:
    s = Settings(
        state_dir=tmp_path,
        spark_master_port=17077,
        spark_master_webui_port=18081,
        spark_worker_port=17078,
        spark_worker_webui_port=18082,
        spark_worker_cores=1,
        spark_worker_memory="1g",
    )
    assert spark_service.master_argv(s, HOME) == [
        "/opt/pyspark/bin/spark-class", "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", "17077", "--webui-port", "18081",
    ]  # fmt: skip
    assert spark_service.worker_argv(s, HOME) == [
        "/opt/pyspark/bin/spark-class", "org.apache.spark.deploy.worker.Worker",
        "--host", "127.0.0.1", "--port", "17078", "--webui-port", "18082",
        "--cores", "1", "--memory", "1g",
        "--work-dir", str(tmp_path.resolve() / "spark" / "work"),
        "spark://127.0.0.1:17077",
    ]  # fmt: skip
    assert spark_service.webui_url(s) == "http://127.0.0.1:18081"


def test_daemon_env_pins_home_java_conf_and_the_ui_address(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "SPARK_CONF_DIR": "/etc/spark", "SPARK_ENV_LOADED": "1"}
    env = spark_service.daemon_env(Settings(state_dir=tmp_path), base, HOME, Path("/jdk17"))
    assert env["PATH"] == "/usr/bin"
    assert env["SPARK_HOME"] == "/opt/pyspark"
    assert env["JAVA_HOME"] == "/jdk17"
    # Without SPARK_LOCAL_IP the web UIs listen on 0.0.0.0.
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["SPARK_CONF_DIR"] == str(tmp_path.resolve() / "spark" / "conf")
    assert "SPARK_ENV_LOADED" not in env


def test_start_refuses_a_non_loopback_bind_host(tmp_path: Path) -> None:
    s = Settings(
        state_dir=tmp_path,
        bind_host="10.1.2.3",
        cassandra_username="pos",
        cassandra_password="x",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_username="pos",
        kafka_sasl_password="y",
    )
    with pytest.raises(ServiceError, match="without authentication"):
        spark_service.start(s)
    assert not (tmp_path / "spark").exists()


@pytest.mark.parametrize(
    ("master", "here"),
    [
        ("local[*]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077,127.0.0.1:7078", True),
        ("spark://spark-master:7077", False),
        ("spark://127.0.0.1:7077,10.0.0.2:7077", False),
        ("yarn", False),
        ("k8s://https://10.0.0.1:6443", False),
    ],
)
def test_on_this_machine(master: str, here: bool) -> None:
    assert on_this_machine(master) is here


def test_a_loopback_standalone_master_keeps_the_driver_on_loopback(tmp_path: Path) -> None:
    spark = tmp_path / "spark"
    spark.mkdir()
    for name in (
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
        "spark-cassandra-connector_2.12-3.5.1.jar",
        "delta-spark_2.12-3.3.2.jar",
    ):
        (spark / name).write_bytes(b"")
    conf = spark_conf(Settings(jars_dir=tmp_path, spark_master="spark://127.0.0.1:7077"), "job")
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    # Executors fetch spark.jars from the driver, which they reach on 127.0.0.1.
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert len(conf["spark.jars"].split(",")) == 3
