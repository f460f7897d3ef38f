"""One frozen, typed settings object for every job, built once at the edge.

Values come from environment variables prefixed ``POS_`` (for example
``POS_KAFKA_BOOTSTRAP_SERVERS``) or from CLI flags that override them; nothing
below the entry points reads the environment. Defaults run everything on one
machine, bound to 127.0.0.1. Run ``python -m pos_lambda.settings`` to print the
effective configuration.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import time
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The checkout this package is installed from (editable, as `make setup` and the image do).
PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Consistency levels a client may ask for (names of cassandra.ConsistencyLevel and of
# the Spark Cassandra Connector's *.consistency.level settings).
Consistency = Literal[
    "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"
]


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    bind_host: str = Field(
        default="127.0.0.1",
        description="Local services bind here only. Anything but a loopback address needs "
        "Cassandra and Kafka authentication configured (see _exposed_needs_auth).",
    )

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
    kafka_security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="How every client talks to Kafka; SASL_* sends the SASL login below "
        "(SASL_SSL on any network you do not own).",
    )
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    kafka_ssl_ca_location: str = Field(
        default="", description="CA bundle (PEM) that signed the brokers' certificates (SASL_SSL)."
    )

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
    cassandra_username: str = Field(
        default="", description="Role for PasswordAuthenticator; empty: no login is sent."
    )
    cassandra_password: SecretStr = SecretStr("")
    cassandra_read_consistency: Consistency = Field(
        default="LOCAL_QUORUM",
        description="Every read (Spark connector and driver sessions). The speed layer reads "
        "back what its previous micro-batch wrote: read + write levels must overlap "
        "(LOCAL_QUORUM + LOCAL_QUORUM) on a replicated keyspace. On one node any level is 1.",
    )
    cassandra_write_consistency: Consistency = Field(
        default="LOCAL_QUORUM", description="Every write (Spark connector and driver sessions)."
    )
    cassandra_local_dc: str = Field(
        default="",
        description="The data centre the pipeline's clients treat as local (LOCAL_* "
        "consistency levels count replicas there); empty: the contact points' data centre. "
        "Name it on a multi-DC cluster.",
    )
    cassandra_heap: str = Field(default="1G", description="Local Cassandra JVM heap.")
    cassandra_concurrent_writes: int = Field(
        default=32, ge=1, description="Concurrent write batches per Spark task (connector)."
    )

    # --- Spark ---------------------------------------------------------------
    spark_master: str = Field(default="local[*]", description="Any Spark master URL.")
    spark_shuffle_partitions: int = Field(
        default=4, ge=1, description="Small on one machine; raise on a cluster."
    )
    spark_delta_snapshot_partitions: int = Field(
        default=4,
        ge=1,
        description="Partitions of the job in which Delta rebuilds a table's state "
        "(spark.databricks.delta.snapshotPartitions, 50 by Delta's default): the "
        "archiver's every micro-batch rebuilds the master dataset's to check its "
        "idempotency id. Small on one machine; raise on a cluster with a large table.",
    )
    spark_scheduler_mode: Literal["FAIR", "FIFO"] = Field(
        default="FAIR",
        description="How a driver's concurrent jobs share the executors: FAIR gives the "
        "speed layer's views query its cores ahead of the archiver's (infra/"
        "spark-scheduler-pools.xml); FIFO is Spark's default, first job first.",
    )
    spark_python_daemon_module: str = Field(
        default="pos_lambda.adapters.spark_python_daemon",
        description="The module Spark starts its Python workers through "
        "(spark.python.daemon.module): the project's, PySpark's own daemon without two "
        "costs per task on Python 3.11 (adapters/spark_python_daemon.py); pyspark.daemon is "
        "PySpark's (benchmarks compare the two).",
    )
    spark_driver_memory: str = "2g"
    spark_driver_java_options: str = Field(
        default="-XX:+UseParallelGC",
        description="JVM options of the Spark driver (added to spark.driver."
        "extraJavaOptions after the project's log configuration). The default is the "
        "throughput collector: in local mode the driver runs every task, and on two cores "
        "G1's barriers and concurrent threads take CPU from them (side by side: both speed "
        "queries one-shot 1.17x as fast; at 1,000 events/s the views query's micro-batches "
        "0.67x and 0.85x as long in two pairs; docs/speed-performance.md). Empty: the "
        "JVM's default (G1).",
    )
    spark_class_archives: bool = Field(
        default=True,
        description="Keep the Spark driver JVM's loaded classes from one run to the next "
        "(JDK 17 class data sharing, spark_class_archive.py), in STATE_DIR/class-archives: "
        "a driver's first run writes its archive at exit, later runs start from it (a "
        "one-shot views run 22.6 s instead of 28.5 s; both speed queries one-shot 1.04x-1.17x "
        "as fast). Off by itself for a driver whose JVM starts with a Java agent or a "
        "flight recording, which JDK 17 cannot combine with an archive. false: every JVM "
        "loads every class from the jars.",
    )
    spark_master_port: int = Field(
        default=7077, ge=1, le=65535, description="Local standalone master (`make spark`)."
    )
    spark_master_webui_port: int = Field(
        default=8081, ge=1, le=65535, description="Its web UI and JSON state (`/json/`)."
    )
    spark_worker_port: int = Field(default=7078, ge=1, le=65535, description="Local worker.")
    spark_worker_webui_port: int = Field(default=8082, ge=1, le=65535)
    spark_worker_cores: int = Field(default=2, ge=1, description="Cores the local worker offers.")
    spark_worker_memory: str = Field(
        default="2g", description="Memory the local worker offers its executors."
    )
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
        default=5.0, gt=0, description="Micro-batch trigger interval of the views query."
    )
    speed_archive_trigger_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Micro-batch trigger interval of the archiver (Kafka -> master "
        "dataset). Only the hourly batch layer reads the master dataset, so it need not "
        "be fresh to the second: a longer interval writes fewer, larger files and Delta "
        "commits, and leaves the cores to the views query, whose latency users see.",
    )
    speed_archiver_group: str = Field(
        default="pos-archiver",
        min_length=1,
        description="Kafka consumer group to which the archiver commits each micro-batch's "
        "end offsets once the master dataset holds them (Spark keeps its own in the "
        "checkpoint): Kafka's tools show the archiver's lag by it, and the batch DAG's "
        "await_archive waits on it (src/pos_lambda/adapters/archive_offsets.py).",
    )
    speed_starting_offsets: str = Field(
        default="earliest",
        pattern=r"^(earliest|latest|\{.*\})$",
        description="Where a new checkpoint starts: earliest, latest or Spark's JSON form.",
    )
    speed_max_offsets_per_trigger: int = Field(
        default=50_000, ge=1, description="Caps a micro-batch so a backlog drains in steps."
    )
    speed_kafka_fetch_max_wait_ms: int = Field(
        default=10,
        ge=0,
        description="fetch.max.wait.ms of the speed layer's Kafka consumers: how long the "
        "broker holds a fetch that finds no new data. A micro-batch reads to the end of "
        "the log, so Kafka's 500 ms default was paid in nearly every micro-batch "
        "(measured: docs/speed-performance.md).",
    )
    speed_max_lateness_hours: float = Field(
        default=48.0,
        gt=0,
        description="Receipts arriving later than this after they happened skip the speed "
        "views (counted in progress) and are left to the batch layer.",
    )
    speed_bucket_reads_from: float = Field(
        default=50.0,
        gt=0,
        description="A views micro-batch with at least this many receipts per receipt_keys "
        "partition (key bucket of 1,000 receipt numbers) on average, a backlog, reads whole "
        "partitions instead of one row per receipt (measured: README, Benchmarks).",
    )
    speed_native_check_from: int = Field(
        default=4_000,
        ge=0,
        description="A views micro-batch after one of at least this many Kafka records (a "
        "backlog; the first micro-batch of a run counts as one of "
        "speed_max_offsets_per_trigger) validates natively in Spark first and sends only "
        "what that path does not accept to the contract's Python validator: faster per "
        "record, slower to plan (measured: docs/speed-performance.md). 0: always; above "
        "speed_max_offsets_per_trigger: never.",
    )
    speed_driver_reads_below: int = Field(
        default=4_000,
        ge=0,
        description="A views micro-batch after one of fewer than this many Kafka records "
        "(the first micro-batch of a run counts as one of speed_max_offsets_per_trigger) "
        "collects its records' keys in its first Spark job and, with fewer valid records "
        "than this, reads the stored rows it needs (receipt_keys by receipt, agg_15m_speed "
        "by store-day) with one CQL query per partition from the driver, not with a Spark "
        "join per table: cheaper to plan (measured: docs/speed-performance.md). 0: never.",
    )
    speed_driver_writes_below: int = Field(
        default=3_000,
        ge=0,
        description="A views micro-batch of fewer than this many Kafka records writes its rows "
        "(aggregates, raw receipts, receipt_keys, conflicts, dead letters) from the driver: "
        "collected, then a prepared CQL INSERT per row, a partition's rows in one unlogged "
        "batch, many in flight, not a Spark connector job per table: cheaper up to about "
        "3,000 records, which covers a running stream's micro-batches at 1,000 events/s "
        "(~1,000 records; measured: docs/speed-performance.md). 0: never.",
    )
    speed_drivers: Literal["auto", "per-query", "shared"] = Field(
        default="auto",
        description="How `pos-speed run` runs its two queries: per-query, each in a Spark "
        "driver (application) of its own, the archiver's at a lower CPU priority "
        "(speed_archiver_nice), so that on a few cores the operating system's scheduler, "
        "not Spark's task slots, lets the views query's micro-batches go first; shared, "
        "both in one driver (fair-scheduler pools). auto: per-query in local mode, shared "
        "on a cluster master (two applications would each ask the cluster for every core) "
        "and for `--available-now` (one JVM loads and compiles Spark's code once: both "
        "queries one-shot 1.06x-1.27x as fast, side by side).",
    )
    speed_archiver_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="The archiver's driver's niceness when the queries run per-query: the "
        "master dataset feeds the hourly batch layer, so it yields the CPU to the views "
        "query, whose latency users see, and catches up when that is idle (19, the lowest "
        "priority: at 1,000 events/s p99 3.20 s vs 4.29 s at 10, measured: "
        "docs/speed-performance.md). 0: same priority.",
    )
    speed_max_restarts: int = Field(
        default=5,
        ge=0,
        description="A failed streaming query (Cassandra or Kafka unreachable) restarts from "
        "its checkpoint this many times in a row, with backoff, before pos-speed exits.",
    )
    speed_crash_point: str | None = Field(
        default=None,
        pattern=r"^(after_aggregates|after_raw_rows|after_receipt_keys)$",
        description="Testing only: SIGKILL the speed layer at this point of a micro-batch "
        "(after_aggregates, after_raw_rows, after_receipt_keys: its writes in order) to prove "
        "that the replay converges.",
    )

    # --- batch layer (`pos-batch`, scheduled by dags/) -------------------------
    batch_lookback_hours: float = Field(
        default=48.0,
        ge=0,
        description="A pinned run (`--delta-version`) recomputes whole UTC days back to its "
        "start minus this. Hourly runs fold every newly archived record into its own day, "
        "however late, so this no longer bounds what converges.",
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
    batch_pause_before_commit: Path | None = Field(
        default=None,
        description="Testing only: before committing the pointer, wait until this file "
        "exists, so that a test can make another run commit in between (a race).",
    )

    # --- serving layer (`pos-serve`, `make serve`) ------------------------------
    serve_port: int = Field(
        default=8000, ge=1, le=65535, description="HTTP API and dashboard (bind_host only)."
    )
    serve_max_range_days: int = Field(
        default=31,
        ge=1,
        description="Largest time range one request may ask for (a day is 96 windows); "
        "larger ones are refused with 422 so one request cannot read a store's history.",
    )
    serve_page_size: int = Field(
        default=100, ge=1, le=1000, description="Receipts per page when the caller names none."
    )
    serve_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Cassandra connect and request timeout of the serving layer; past it a "
        "request answers 503 with the reason instead of hanging.",
    )
    serve_page_key: SecretStr = Field(
        default=SecretStr(""),
        description="Secret that signs the receipts' page tokens (every serving instance "
        "behind one address must share it); empty: a key generated once into "
        "$POS_STATE_DIR/serve/page.key.",
    )
    serve_dead_letter_scan_limit: int = Field(
        default=100_000,
        ge=1,
        description="Pipeline health counts dead letters by reason over at most this many "
        "rows (and says so when it stopped there).",
    )

    # --- alerts (`pos-alerts`, src/pos_lambda/alerts/) -----------------------------------------
    alerts_group_id: str = Field(
        default="pos-alerts",
        description="Consumer group of the alerts processors: instances in it share the "
        "input's partitions.",
    )
    alerts_instance_id: str = Field(
        default="1",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="Stable id of one processor instance, unique among those running: its "
        "transactional.id is pos-alerts-<instance id>, so a restarted instance fences its "
        "predecessor.",
    )
    alerts_mode: Literal["exactly_once", "at_least_once"] = Field(
        default="exactly_once",
        description="exactly_once: alerts and input offsets in one Kafka transaction. "
        "at_least_once: no transactions, offsets committed after the alerts are acked "
        "(duplicates after a crash; for comparison only).",
    )
    alerts_transaction_max_ms: int = Field(
        default=100,
        ge=1,
        description="A transaction (or, at least once, an offset commit) closes this many ms "
        "after its first input message: the latency/throughput trade-off.",
    )
    alerts_transaction_max_messages: int = Field(
        default=1000, ge=1, description="... or after this many input messages, if sooner."
    )
    alerts_transaction_timeout_ms: int = Field(
        default=60_000,
        ge=1000,
        description="The broker aborts a transaction left open this long (an instance that "
        "died and is not restarted): read_committed readers of the alerts topic and the next "
        "owner of its partitions wait at most this.",
    )
    alerts_session_timeout_ms: int = Field(
        default=45_000,
        ge=6000,
        description="Consumer-group session timeout: a silent or stopped instance's "
        "partitions move to the others after this (static membership: a restarted instance "
        "with the same id takes them back at once).",
    )
    alerts_high_value_threshold: Decimal = Field(
        default=Decimal("100.00"), description="Alert on a receipt whose total exceeds this."
    )
    alerts_large_return_threshold: Decimal = Field(
        default=Decimal("10.00"),
        ge=0,
        description="Alert on a receipt whose returned lines (negative quantities) are worth "
        "more than this.",
    )
    alerts_silence_minutes: float = Field(
        default=30.0,
        gt=0,
        description="Alert when a device's next receipt comes more than this many minutes of "
        "store hours after its previous one (event time: happened_at).",
    )
    alerts_store_opens_at: time = Field(
        default=time(7, 0), description="Store hours (UTC) for the silence rule: opening."
    )
    alerts_store_closes_at: time = Field(
        default=time(21, 0),
        description="Store hours (UTC): closing, after the opening on the same day.",
    )
    alerts_lease_ttl_s: int = Field(
        default=15,
        ge=3,
        le=3600,
        description="An instance holds a lease on its id in Cassandra (alerts_leases), "
        "renewed every third of this: a second instance with the same id refuses to start "
        "(exit 5) while the holder renews; after a crash, the restarted instance waits at "
        "most this long for the dead holder's lease to expire.",
    )
    alerts_max_restarts_in_place: int = Field(
        default=5,
        ge=0,
        description="The watchdog restarts an instance whose Kafka call hung "
        "(librdkafka#5456) at most this many times in a row without a committed "
        "transaction in between; then it exits 6 for a supervisor to act (0: never).",
    )
    alerts_sink_group_id: str = Field(
        default="pos-alerts-sink", description="Consumer group of `pos-alerts sink`."
    )
    alerts_crash_point: str | None = Field(
        default=None,
        pattern=r"^(kill_after_produce|stop_after_produce)$",
        description="Testing only: in the transaction numbered alerts_crash_at_transaction "
        "that produced alerts, once they are on the broker and before the commit, SIGKILL "
        "(kill_after_produce) or SIGSTOP (stop_after_produce: a zombie to fence) the processor.",
    )
    alerts_crash_at_transaction: int = Field(
        default=1, ge=1, description="Testing only: see alerts_crash_point."
    )

    @model_validator(mode="after")
    def _exposed_needs_auth(self) -> Settings:
        """Refuse a bind_host other machines can reach unless clients authenticate."""
        if is_loopback(self.bind_host):
            return self
        missing = []
        if not (self.cassandra_username and self.cassandra_password.get_secret_value()):
            missing.append("POS_CASSANDRA_USERNAME and POS_CASSANDRA_PASSWORD")
        if not self.kafka_sasl:
            missing.append(
                "POS_KAFKA_SECURITY_PROTOCOL=SASL_SSL (or SASL_PLAINTEXT) with "
                "POS_KAFKA_SASL_USERNAME and POS_KAFKA_SASL_PASSWORD"
            )
        if missing:
            raise ValueError(
                f"bind_host {self.bind_host!r} is not a loopback address, so what this process "
                "serves is reachable from other machines; it refuses to start without "
                f"authentication: set {'; '.join(missing)} (docs/deploy.md, Security), or keep "
                "POS_BIND_HOST=127.0.0.1"
            )
        return self

    @property
    def kafka_sasl(self) -> bool:
        return (
            self.kafka_security_protocol.startswith("SASL_")
            and bool(self.kafka_sasl_username)
            and bool(self.kafka_sasl_password.get_secret_value())
        )

    @property
    def kafka_security_config(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings every client adds to its own."""
        conf = {"security.protocol": self.kafka_security_protocol.lower()}
        if self.kafka_security_protocol.startswith("SASL_"):
            conf |= {
                "sasl.mechanisms": self.kafka_sasl_mechanism,
                "sasl.username": self.kafka_sasl_username,
                "sasl.password": self.kafka_sasl_password.get_secret_value(),
            }
        if self.kafka_ssl_ca_location:
            conf["ssl.ca.location"] = self.kafka_ssl_ca_location
        return conf

    @property
    def spark_kafka_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (the Java client, `kafka.` prefixed)."""
        opts = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": self.kafka_security_protocol,
        }
        if self.kafka_security_protocol.startswith("SASL_"):
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.kafka_sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            # JAAS values are quoted strings; json.dumps escapes quotes and backslashes.
            login = (
                f"username={json.dumps(self.kafka_sasl_username)} "
                f"password={json.dumps(self.kafka_sasl_password.get_secret_value())}"
            )
            opts |= {
                "kafka.sasl.mechanism": self.kafka_sasl_mechanism,
                "kafka.sasl.jaas.config": f"{module} required {login};",
            }
        if self.kafka_ssl_ca_location:
            opts |= {
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": self.kafka_ssl_ca_location,
            }
        return opts

    @property
    def class_archive_dir(self) -> Path:
        return self.state_dir / "class-archives"

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
