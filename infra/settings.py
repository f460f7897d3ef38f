"""One frozen, typed settings object for every job, built once at the edge.

Values come from environment variables prefixed ``POS_`` (for example
``POS_KAFKA_BOOTSTRAP_SERVERS``) or from CLI flags that override them; nothing
below the entry points reads the environment. Defaults run everything on one
machine, bound to 127.0.0.1. Run ``python -m infra.settings`` to print the
effective configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    """Endpoints, paths and tuning knobs of the pipeline (see README, Configuration)."""

    model_config = SettingsConfigDict(env_prefix="POS_", frozen=True, extra="forbid")

    # --- local runtime -------------------------------------------------------
    state_dir: Path = Field(
        default=PROJECT_ROOT / ".state",
        description="Data, logs and pid files of the local Kafka and Cassandra.",
    )
    jars_dir: Path = Field(
        default=PROJECT_ROOT / ".cache" / "jars",
        description="Jar cache filled from Maven Central by `make jars`.",
    )
    java_home: Path | None = Field(
        default=None,
        description="JDK 17 home; found automatically when unset (Cassandra needs 17).",
    )
    bind_host: str = Field(default="127.0.0.1", description="Local services bind here only.")

    # --- Kafka ---------------------------------------------------------------
    kafka_port: int = Field(default=9092, ge=1, le=65535)
    kafka_controller_port: int = Field(default=9093, ge=1, le=65535)
    kafka_bootstrap_servers: str = Field(
        default="",
        description="Clients connect here; defaults to bind_host:kafka_port.",
    )
    kafka_heap: str = Field(default="512m", description="Local broker JVM heap (-Xmx).")
    topic_transactions: str = "pos.transactions"
    topic_dead_letters: str = "pos.dead_letters"
    topic_alerts: str = "pos.alerts"
    topic_partitions: int = Field(default=4, ge=1, description="Partitions of new topics.")
    topic_replication_factor: int = Field(default=1, ge=1, description="3 on a real cluster.")

    # --- Cassandra -----------------------------------------------------------
    cassandra_port: int = Field(default=9042, ge=1, le=65535)
    cassandra_storage_port: int = Field(default=7000, ge=1, le=65535)
    cassandra_jmx_port: int = Field(default=7199, ge=1, le=65535)
    cassandra_hosts: str = Field(
        default="",
        description="Comma-separated contact points; defaults to bind_host.",
    )
    cassandra_keyspace: str = Field(default="pos", pattern=r"^[a-z][a-z0-9_]{0,47}$")
    cassandra_replication_factor: int = Field(default=1, ge=1)
    cassandra_heap: str = Field(default="1G", description="Local Cassandra JVM heap.")
    cassandra_concurrent_writes: int = Field(
        default=32, ge=1, description="Concurrent write batches per Spark task (connector)."
    )

    # --- Spark ---------------------------------------------------------------
    spark_master: str = Field(default="local[*]", description="Any Spark master URL.")
    spark_shuffle_partitions: int = Field(
        default=4, ge=1, description="Small on one machine; raise on a cluster."
    )
    spark_driver_memory: str = "2g"
    data_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "data",
        description="Master dataset and checkpoints (any Hadoop URI on a cluster).",
    )

    # --- Airflow (local batch scheduler, `pos-infra airflow up`) ----------------
    airflow_port: int = Field(
        default=8080, ge=1, le=65535, description="Airflow API server and UI (bind_host only)."
    )
    airflow_parallelism: int = Field(
        default=2,
        ge=1,
        description="Task slots of the LocalExecutor; it forks this many workers at start, "
        "so keep it near the core count.",
    )
    airflow_admin_user: str = Field(
        default="admin",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Admin login of Airflow's simple auth manager; its password is generated "
        "once into $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.",
    )
    airflow_dags_dir: Path = Field(
        default=PROJECT_ROOT / "dags", description="The DAGs folder Airflow parses."
    )
    airflow_sql_alchemy_conn: str = Field(
        default="",
        description="Airflow metadata DB; empty means SQLite under the state dir (local "
        "development only: use PostgreSQL for anything real).",
    )

    # --- speed layer ---------------------------------------------------------
    speed_trigger_seconds: float = Field(
        default=5.0, gt=0, description="Micro-batch trigger interval of the streaming jobs."
    )
    speed_starting_offsets: str = Field(
        default="earliest",
        pattern=r"^(earliest|latest|\{.*\})$",
        description="Where a new checkpoint starts: earliest, latest or Spark's JSON form.",
    )
    speed_max_offsets_per_trigger: int = Field(
        default=50_000, ge=1, description="Caps a micro-batch so a backlog drains in steps."
    )
    speed_max_lateness_hours: float = Field(
        default=48.0,
        gt=0,
        description="Receipts arriving later than this after they happened skip the speed "
        "views (counted in progress) and are left to the batch layer.",
    )
    speed_max_restarts: int = Field(
        default=5,
        ge=0,
        description="A failed streaming query (Cassandra or Kafka unreachable) restarts from "
        "its checkpoint this many times in a row, with backoff, before pos-speed exits.",
    )
    speed_crash_point: str | None = Field(
        default=None,
        pattern=r"^(after_raw_rows|after_receipt_keys)$",
        description="Testing only: SIGKILL the speed layer at this point of a micro-batch "
        "(after_raw_rows, after_receipt_keys) to prove that the replay converges.",
    )

    # --- batch layer (`pos-batch`, scheduled by dags/) -------------------------
    batch_lookback_hours: float = Field(
        default=48.0,
        ge=0,
        description="A scheduled run recomputes whole UTC days back to its start minus this, "
        "so receipts that arrive late (up to this) converge; keep it >= the speed bound.",
    )
    batch_vacuum_retain_hours: float = Field(
        default=168.0,
        ge=168.0,
        description="VACUUM keeps the master dataset's files this long: batch reruns pinned "
        "to an older table version (time travel) work within it. Delta refuses less than "
        "7 days by default.",
    )
    batch_crash_point: str | None = Field(
        default=None,
        pattern=r"^(after_receipts)$",
        description="Testing only: SIGKILL the batch job at this point of a run (after its "
        "receipts are written, before its aggregates and pointer) to prove that readers "
        "keep the previous version.",
    )

    @property
    def checkpoint_dir(self) -> Path:
        return self.data_dir / "checkpoints"

    @property
    def master_dataset_dir(self) -> Path:
        return self.data_dir / "master"

    @property
    def speed_status_file(self) -> Path:
        return self.data_dir / "speed_status.json"

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_bootstrap_servers or f"{self.bind_host}:{self.kafka_port}"

    @property
    def cassandra_contact_points(self) -> list[str]:
        raw = self.cassandra_hosts or self.bind_host
        return [h.strip() for h in raw.split(",") if h.strip()]


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, with explicit overrides (CLI flags) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]


if __name__ == "__main__":
    print(json.dumps(load_settings().model_dump(mode="json"), indent=2))
