"""The local Airflow's configuration, rendered without starting anything."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import airflow_service

BIN = Path("/venv/bin")


def _env(s: Settings, path: str = "/usr/bin:/bin") -> dict[str, str]:
    return airflow_service.child_env(s, {"PATH": path, "HOME": "/root"}, BIN, Path("/jdk17"))


def test_airflow_binds_loopback_on_the_configured_port(tmp_path: Path) -> None:
    env = _env(Settings(state_dir=tmp_path, airflow_port=18080))
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1"
    assert env["AIRFLOW__API__PORT"] == "18080"
    assert env["AIRFLOW__API__BASE_URL"] == "http://127.0.0.1:18080"
    # Task runners must reach the Execution API on the same port, not the 8080 default.
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"


def test_airflow_home_db_and_dags_folder(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    env = _env(Settings(state_dir=tmp_path / "state", airflow_dags_dir=dags))
    assert env["AIRFLOW_HOME"] == str(tmp_path / "state" / "airflow")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"sqlite:///{tmp_path / 'state' / 'airflow' / 'airflow.db'}?timeout=60"
    )  # writers wait for SQLite's lock (Python's default: 5 s)
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(dags)
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["HOME"] == "/root"  # the rest of the environment is kept


def test_a_configured_metadata_db_is_used_as_is(tmp_path: Path) -> None:
    url = "postgresql+psycopg2://airflow:pw@127.0.0.1:5432/airflow"
    env = _env(Settings(state_dir=tmp_path, airflow_sql_alchemy_conn=url))
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url


def test_local_executor_sized_by_settings_and_simple_auth_admin(tmp_path: Path) -> None:
    env = _env(Settings(state_dir=tmp_path, airflow_parallelism=3, airflow_admin_user="ops"))
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "3"
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith(".SimpleAuthManager")
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "ops:admin"


def test_venv_first_on_path_once_and_spark_gets_the_venv_and_jdk(tmp_path: Path) -> None:
    env = _env(Settings(state_dir=tmp_path))
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert _env(Settings(state_dir=tmp_path), path=env["PATH"])["PATH"] == env["PATH"]
    assert env["PYSPARK_PYTHON"] == "/venv/bin/python"
    assert env["JAVA_HOME"] == "/jdk17"


def test_spark_connection_follows_the_spark_master(tmp_path: Path) -> None:
    for master in ("local[*]", "spark://10.0.0.5:7077", "yarn"):
        env = _env(Settings(state_dir=tmp_path, spark_master=master))
        conn = json.loads(env["AIRFLOW_CONN_SPARK_POS"])
        assert conn == {"conn_type": "spark", "host": master}


def test_scheduler_and_triggerer_start_no_log_server() -> None:
    # Their log servers would listen on every interface.
    assert "--skip-serve-logs" in airflow_service.COMPONENTS["scheduler"]
    assert "--skip-serve-logs" in airflow_service.COMPONENTS["triggerer"]
    assert set(airflow_service.COMPONENTS) == {
        "api-server",
        "scheduler",
        "dag-processor",
        "triggerer",
    }


def test_login_reads_the_generated_password(tmp_path: Path) -> None:
    s = Settings(state_dir=tmp_path)
    assert airflow_service.login(s) is None
    airflow_service.paths(s).root.mkdir(parents=True)
    airflow_service.paths(s).passwords.write_text('{"admin": "s3cret"}\n')
    assert airflow_service.login(s) == ("admin", "s3cret")


def test_health_is_none_when_nothing_listens(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = Settings(state_dir=tmp_path, airflow_port=port)
    assert airflow_service.health(s) is None
    assert airflow_service.status(s) == "stopped"
