"""One frozen, typed settings object for every job, built once at the edge.

Values come from environment variables prefixed ``POS_`` (for example
``POS_KAFKA_BOOTSTRAP_SERVERS``) or from CLI flags that override them; nothing
below the entry points reads the environment. Defaults run everything on one
machine, bound to 127.0.0.1. Run ``python -m pos_lambda.settings`` to print the
effective configuration.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
from datetime import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The checkout this package is installed from (editable, as `make setup` and the image do).
PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Consistency levels a client may ask for (names of cassandra.ConsistencyLevel and of
# the Spark Cassandra Connector's *.consistency.level settings).
Consistency = Literal[
    "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"
]
# The Paxos phase of a lightweight transaction (`... IF ...`): across data centres, or
# within the local one.
SerialConsistency = Literal["SERIAL", "LOCAL_SERIAL"]


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Section(BaseSettings):
    """One frozen section of the settings; it reads its own POS_<SECTION>_* variables.
    A section sets only its `env_prefix`: pydantic merges that into this configuration."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")


def _env_prefix(cls: type[BaseSettings]) -> str:
    """The prefix of a settings class's environment variables (POS_KAFKA_, ...)."""
    return str(cls.model_config.get("env_prefix", "POS_"))


class KafkaSettings(_Section):
    """Kafka: the brokers every client reaches, and the local broker."""

    model_config = SettingsConfigDict(env_prefix="POS_KAFKA_")

    port: int = Field(default=9092, ge=1, le=65535, description="The local broker's client port.")
    controller_port: int = Field(
        default=9093, ge=1, le=65535, description="The local broker's KRaft controller port."
    )
    bootstrap_servers: str = Field(
        default="",
        description="Clients connect here; defaults to bind_host:kafka_port.",
    )
    heap: str = Field(default="512m", description="Local broker JVM heap (-Xmx).")
    security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="How every client talks to Kafka; SASL_* sends the SASL login below "
        "(SASL_SSL on any network you do not own).",
    )
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = Field(
        default="SCRAM-SHA-512", description="SASL mechanism of the login (SASL_* protocols)."
    )
    sasl_username: str = Field(
        default="", description="SASL username of every client (SASL_* protocols)."
    )
    sasl_password: SecretStr = Field(
        default=SecretStr(""), description="SASL password of every client (SASL_* protocols)."
    )
    ssl_ca_location: str = Field(
        default="", description="CA bundle (PEM) that signed the brokers' certificates (SASL_SSL)."
    )

    @property
    def sasl(self) -> bool:
        """Whether clients log in (a SASL protocol with a username and password)."""
        return (
            self.security_protocol.startswith("SASL_")
            and bool(self.sasl_username)
            and bool(self.sasl_password.get_secret_value())
        )

    @property
    def security_config(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings every client adds to its own."""
        conf = {"security.protocol": self.security_protocol.lower()}
        if self.security_protocol.startswith("SASL_"):
            conf |= {
                "sasl.mechanisms": self.sasl_mechanism,
                "sasl.username": self.sasl_username,
                "sasl.password": self.sasl_password.get_secret_value(),
            }
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf


_OUTPUT_TOPIC = (
    "A transactional processor's output: the alerts (`pos-alerts run`); the deduplicated "
    "topic, one record per receipt, the winner's message (`pos-receipts run`)."
)


class TopicSettings(_Section):
    """The pipeline's Kafka topics."""

    model_config = SettingsConfigDict(env_prefix="POS_TOPIC_")

    transactions: str = Field(
        default="pos.transactions",
        description="The input topic the POS terminals (the simulator) produce receipts to.",
    )
    dead_letters: str = Field(
        default="pos.dead_letters",
        description="Where records the contract refuses are copied, with the reason.",
    )
    alerts: str = Field(default="pos.alerts", description=_OUTPUT_TOPIC)
    receipts: str = Field(default="pos.receipts", description=_OUTPUT_TOPIC)
    partitions: int = Field(default=4, ge=1, description="Partitions of new topics.")
    replication_factor: int = Field(default=1, ge=1, description="3 on a real cluster.")


class CassandraSettings(_Section):
    """Cassandra: the views' store, and the local node."""

    model_config = SettingsConfigDict(env_prefix="POS_CASSANDRA_")

    port: int = Field(
        default=9042, ge=1, le=65535, description="CQL native port (local node and clients)."
    )
    storage_port: int = Field(
        default=7000, ge=1, le=65535, description="The local node's inter-node port."
    )
    jmx_port: int = Field(
        default=7199, ge=1, le=65535, description="The local node's JMX port (nodetool)."
    )
    hosts: str = Field(
        default="",
        description="Comma-separated contact points; defaults to bind_host.",
    )
    keyspace: str = Field(
        default="pos",
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description="Keyspace of every view table (created by `pos-infra schema`).",
    )
    replication_factor: int = Field(
        default=1, ge=1, description="Replication factor of a new keyspace; 3 on a real cluster."
    )
    username: str = Field(
        default="", description="Role for PasswordAuthenticator; empty: no login is sent."
    )
    password: SecretStr = Field(
        default=SecretStr(""), description="Password of the role in POS_CASSANDRA_USERNAME."
    )
    read_consistency: Consistency = Field(
        default="LOCAL_QUORUM",
        description=(
            "Every read (Spark connector and driver sessions). The speed layer reads back what "
            "its previous micro-batch wrote, so read and write levels must overlap (LOCAL_QUORUM "
            "+ LOCAL_QUORUM) on a replicated keyspace; on one node every level is the same."
        ),
    )
    write_consistency: Consistency = Field(
        default="LOCAL_QUORUM",
        description="Every write (Spark connector and driver sessions), and the commit phase "
        "of a lightweight transaction (the batch pointer, the processors' leases).",
    )
    serial_consistency: SerialConsistency = Field(
        default="LOCAL_SERIAL",
        description="The Paxos phase of every lightweight transaction (the batch pointer's "
        "commit, the leases), and the batch layer's read of the pointer before it decides "
        "(a SERIAL read finishes a Paxos round a dead coordinator left half done). "
        "docs/consistency.md lists every statement's level.",
    )
    audit_consistency: Consistency = Field(
        default="ALL",
        description="Every read of `pos-audit`: the final proof reads every replica, so a "
        "replica that missed a write cannot hide it (it fails rather than guess while a "
        "node is down).",
    )
    local_dc: str = Field(
        default="",
        description="The data centre the pipeline's clients treat as local (LOCAL_* "
        "consistency levels count replicas there); empty: the contact points' data centre. "
        "Name it on a multi-DC cluster.",
    )
    speculative_delay_ms: int = Field(
        default=250,
        ge=0,
        description="A read or upsert that may safely run twice (the speed layer's, "
        "serving's, the alert sink's) is sent to the next replica when its coordinator has "
        "not answered within this many ms, up to twice: a frozen or stalled node (a gray "
        "failure, which the driver does not mark down) then costs this delay, not the "
        "request timeout. 0: never. Lightweight transactions and writes that set a "
        "non-frozen list are never sent twice (docs/consistency.md).",
    )
    heap: str = Field(default="1G", description="Local Cassandra JVM heap.")
    concurrent_writes: int = Field(
        default=32, ge=1, description="Concurrent write batches per Spark task (connector)."
    )


class SparkSettings(_Section):
    """Spark: the jobs' sessions, and the local standalone cluster (`make spark`)."""

    model_config = SettingsConfigDict(env_prefix="POS_SPARK_")

    master: str = Field(default="local[*]", description="Any Spark master URL.")
    shuffle_partitions: int = Field(
        default=4, ge=1, description="Small on one machine; raise on a cluster."
    )
    delta_snapshot_partitions: int = Field(
        default=4,
        ge=1,
        description="Partitions of the job in which Delta rebuilds a table's state "
        "(spark.databricks.delta.snapshotPartitions, 50 by Delta's default): the "
        "archiver's every micro-batch rebuilds the master dataset's to check its "
        "idempotency id. Small on one machine; raise on a cluster with a large table.",
    )
    scheduler_mode: Literal["FAIR", "FIFO"] = Field(
        default="FAIR",
        description="How a driver's concurrent jobs share the executors: FAIR gives the "
        "speed layer's views query its cores ahead of the archiver's "
        "(src/pos_lambda/adapters/spark-scheduler-pools.xml); FIFO is Spark's default, "
        "first job first.",
    )
    python_daemon_module: str = Field(
        default="pos_lambda.adapters.spark_python_daemon",
        description="The module Spark starts its Python workers through "
        "(spark.python.daemon.module): the project's, PySpark's own daemon without two "
        "costs per task on Python 3.11 (adapters/spark_python_daemon.py); pyspark.daemon is "
        "PySpark's (benchmarks compare the two).",
    )
    driver_memory: str = Field(default="2g", description="Spark driver heap (spark.driver.memory).")
    driver_java_options: str = Field(
        default="-XX:+UseParallelGC",
        description=(
            "JVM options of the Spark driver, after the project's log configuration. The default,"
            " the throughput collector, leaves the CPU to the tasks, which in local mode run in "
            "the driver (docs/speed-performance.md); empty: the JVM's default (G1)."
        ),
    )
    bounded_java_options: str = Field(
        default="-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
        description=(
            "JVM options added to the driver's for bounded runs on a cold JVM: `pos-speed run "
            "--available-now`, `pos-batch run` and `quality` (the DAG's spark-submit too). C1 "
            "only: compiling less beats waiting for C2 there (one-shot views, 50k messages: "
            "4,749 vs 3,147 events/s, 200k: 7,745 vs 7,332; a batch run over 5,000 receipts: "
            "12.0 vs 16.2 s). The code cache is kept at tiered compilation's 240 MB: C1 alone "
            "gets 48 MB, which Spark's generated classes filled in a long one-shot (compilation "
            "disabled, then the driver died). Empty: tiered compilation, as continuous runs use."
        ),
    )
    class_archives: bool = Field(
        default=True,
        description=(
            "Keep the Spark driver JVM's loaded classes from one run to the next (JDK 17 class "
            "data sharing) in STATE_DIR/class-archives: a driver's first run writes its archive "
            "at exit, later runs start from it. Off by itself for a JVM with a Java agent or a "
            "flight recording, which JDK 17 cannot combine with an archive."
        ),
    )
    master_port: int = Field(
        default=7077, ge=1, le=65535, description="Local standalone master (`make spark`)."
    )
    master_webui_port: int = Field(
        default=8081, ge=1, le=65535, description="Its web UI and JSON state (`/json/`)."
    )
    worker_port: int = Field(default=7078, ge=1, le=65535, description="Local worker.")
    worker_webui_port: int = Field(
        default=8082, ge=1, le=65535, description="The local worker's web UI."
    )
    worker_cores: int = Field(default=2, ge=1, description="Cores the local worker offers.")
    worker_memory: str = Field(
        default="2g", description="Memory the local worker offers its executors."
    )


class AirflowSettings(_Section):
    """Airflow: the local batch scheduler (`pos-infra airflow up`)."""

    model_config = SettingsConfigDict(env_prefix="POS_AIRFLOW_")

    port: int = Field(
        default=8080, ge=1, le=65535, description="Airflow API server and UI (bind_host only)."
    )
    parallelism: int = Field(
        default=2,
        ge=1,
        description="Task slots of the LocalExecutor; it forks this many workers at start, "
        "so keep it near the core count.",
    )
    admin_user: str = Field(
        default="admin",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Admin login of Airflow's simple auth manager; its password is generated "
        "once into $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.",
    )
    dags_dir: Path = Field(
        default=PROJECT_ROOT / "dags", description="The DAGs folder Airflow parses."
    )
    sql_alchemy_conn: str = Field(
        default="",
        description="Airflow metadata DB; empty means SQLite under the state dir (local "
        "development only: use PostgreSQL for anything real).",
    )


class SpeedSettings(_Section):
    """The speed layer (`pos-speed run`)."""

    model_config = SettingsConfigDict(env_prefix="POS_SPEED_")

    trigger_seconds: float = Field(
        default=1.0,
        gt=0,
        description="Micro-batch trigger interval of the views query: a receipt is visible "
        "about this plus one micro-batch after it reached Kafka. Longer: fewer, larger "
        "micro-batches for less CPU.",
    )
    archive_trigger_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Micro-batch trigger interval of the archiver (Kafka -> master "
        "dataset). Only the hourly batch layer reads the master dataset, so it need not "
        "be fresh to the second: a longer interval writes fewer, larger files and Delta "
        "commits, and leaves the cores to the views query, whose latency users see.",
    )
    archiver_group: str = Field(
        default="pos-archiver",
        min_length=1,
        description="Kafka consumer group to which the archiver commits each micro-batch's "
        "end offsets once the master dataset holds them (Spark keeps its own in the "
        "checkpoint): Kafka's tools show the archiver's lag by it, and the batch DAG's "
        "await_archive waits on it (src/pos_lambda/adapters/archive_offsets.py).",
    )
    starting_offsets: str = Field(
        default="earliest",
        pattern=r"^(earliest|latest|\{.*\})$",
        description="Where a new checkpoint starts: earliest, latest or Spark's JSON form.",
    )
    max_offsets_per_trigger: int = Field(
        default=50_000, ge=1, description="Caps a micro-batch so a backlog drains in steps."
    )
    kafka_fetch_max_wait_ms: int = Field(
        default=10,
        ge=0,
        description=(
            "fetch.max.wait.ms of the speed layer's Kafka consumers: how long the broker holds a "
            "fetch that finds no new data. A micro-batch reads to the end of the log, so Kafka's "
            "500 ms default would be paid in nearly every micro-batch."
        ),
    )
    kafka_api_timeout_ms: int = Field(
        default=6_000,
        ge=1,
        description=(
            "default.api.timeout.ms of the speed layer's Kafka clients, a bound with two sides "
            "when a broker dies. The driver's offset lookup each micro-batch (the admin client's "
            "listOffsets) is pinned by kafka-clients 3.4 to the leader it looked up first: once "
            "that broker is fenced the call waits until the broker returns or this deadline "
            "(60 s by Kafka's default), then Spark tries again with a new admin client, which "
            "finds the new leader (speed_offset_fetch_retries): shorter, a shorter stall. But "
            "the executors' consumers ask the partition's leader for its offset range after "
            "every poll (Spark 3.5), waiting up to this long for the leader to move, and a task "
            "that times out fails the query (local mode retries no task): it must outlast a "
            "leader's move, 3-6 s on the replicated cluster here (docs/cluster.md). At least "
            "speed_kafka_request_timeout_ms."
        ),
    )
    kafka_request_timeout_ms: int = Field(
        default=3_000,
        ge=1,
        description=(
            "request.timeout.ms of the speed layer's Kafka clients: how long a request waits for "
            "its answer before the connection is given up and the client refreshes its metadata. "
            "It matters when a broker is frozen (SIGSTOP, a long pause): its connections stay "
            "open and nothing answers, for 30 s by Kafka's default. Fetches are answered within "
            "speed_kafka_fetch_max_wait_ms."
        ),
    )
    offset_fetch_retries: int = Field(
        default=30,
        ge=1,
        description=(
            "fetchOffset.numRetries of Spark's Kafka source: how many times the driver's offset "
            "lookup is tried (each up to speed_kafka_api_timeout_ms, a new admin client each "
            "time) before the query fails. 30 tries of 6 s wait about as long for a broker as "
            "Spark's default (3 tries of Kafka's 60 s)."
        ),
    )
    offset_fetch_retry_interval_ms: int = Field(
        default=250,
        ge=0,
        description="fetchOffset.retryIntervalMs of Spark's Kafka source: the pause between two "
        "tries of the driver's offset lookup (1 s by Spark's default).",
    )
    max_lateness_hours: float = Field(
        default=48.0,
        gt=0,
        description="Receipts arriving later than this after they happened skip the speed "
        "views (counted in progress) and are left to the batch layer.",
    )
    gap_max_jump: int = Field(
        default=1000,
        ge=1,
        description=(
            "The gaps view (src/pos_lambda/views/gaps.py): a device's receipt number that jumps "
            "forward by more than this starts a new run (a renumbered device), not a gap of "
            "that many lost receipts. A number below the current run's is always a restart."
        ),
    )
    bucket_reads_from: float = Field(
        default=50.0,
        gt=0,
        description=(
            "A views micro-batch with at least this many receipts per receipt_keys partition on "
            "average (a backlog) reads whole partitions instead of one row per receipt."
        ),
    )
    native_check_from: int = Field(
        default=4_000,
        ge=0,
        description=(
            "A views micro-batch of at least this many Kafka records (a backlog; its size read "
            "from the checkpoint's offset log, else the previous one's) validates natively "
            "first and sends only what that path does not accept to the contract's Python "
            "validator. 0: always; above max_offsets_per_trigger: never."
        ),
    )
    driver_reads_below: int = Field(
        default=4_000,
        ge=0,
        description=(
            "A views micro-batch of fewer than this many Kafka records reads the stored"
            " rows it needs from the driver, one CQL query per partition, instead of a Spark join"
            " per table (cheaper to plan). 0: never."
        ),
    )
    driver_writes_below: int = Field(
        default=3_000,
        ge=0,
        description=(
            "A views micro-batch of fewer than this many Kafka records writes its rows from the "
            "driver (prepared INSERTs, a partition's rows in one unlogged batch) instead of a "
            "connector job per table. 0: never."
        ),
    )
    drivers: Literal["auto", "per-query", "shared"] = Field(
        default="auto",
        description=(
            "How `pos-speed run` runs its two queries: per-query, a Spark driver each, the "
            "archiver's at a lower CPU priority (speed_archiver_nice) so the views query goes "
            "first; shared, both in one driver (fair-scheduler pools). auto: per-query in local "
            "mode, shared on a cluster master and for --available-now."
        ),
    )
    archiver_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description=(
            "The archiver driver's niceness when the queries run per-query: the master dataset "
            "feeds the hourly batch layer, so it yields the CPU to the views query, whose latency"
            " users see. 0: same priority."
        ),
    )
    warm_up: bool = Field(
        default=True,
        description=(
            "Each driver of a continuous `pos-speed run` first runs its micro-batch's work on "
            "synthetic records (views: into speed_warm_up_keyspace; archiver: a scratch Delta "
            "table), so that the cold start (class loading, code generation, JIT) is paid before "
            "`pos-speed` reports itself ready, not by the first receipts. Not when its query "
            "resumes a checkpoint with a commit: the replay of what came meanwhile does the "
            "same work on real records, and warming up first would delay it."
        ),
    )
    warm_up_keyspace: str = Field(
        default="pos_warm_up",
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description=(
            "The scratch keyspace of the views driver's warm-up (created with the speed tables "
            "if missing; shared by every pipeline on the cluster, each warm-up with new keys)."
        ),
    )
    max_restarts: int = Field(
        default=5,
        ge=0,
        description="`pos-speed run` starts a driver that died (a failed query, any signal, an "
        "unexpected exit) again from its checkpoints at most this many times within "
        "speed_restart_window_seconds; one more death in that window and it stops the speed "
        "layer and exits 1 (docs/speed-layer.md, Faults). 0: never restart.",
    )
    restart_window_seconds: float = Field(
        default=600.0,
        gt=0,
        description="The sliding window of speed_max_restarts: a driver that has not died for "
        "this long has its whole restart budget back.",
    )
    restart_backoff_seconds: float = Field(
        default=2.0,
        ge=0,
        description="The first restart of a driver within the window is immediate; the second "
        "waits this long, each further one twice as long as the one before.",
    )
    restart_backoff_max_seconds: float = Field(
        default=30.0,
        ge=0,
        description="The longest wait before a driver's restart (the backoff's cap).",
    )
    query_restarts_in_place: int = Field(
        default=3,
        ge=0,
        description="A driver whose query failed (Cassandra or Kafka away) keeps its JVM: it "
        "waits for the services to answer, then starts the query again from its checkpoint, "
        "at most this many times within speed_restart_window_seconds; past that it exits and "
        "`pos-speed run` starts a fresh driver (speed_layer/in_place.py). 0: always a fresh one.",
    )
    query_restart_wait_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a driver whose query failed waits for Cassandra and Kafka to "
        "answer before it exits for `pos-speed run` to start a fresh one.",
    )
    standby: bool = Field(
        default=False,
        description=(
            "A continuous `pos-speed run` keeps beside each driver a standby: a driver process "
            "that has started its Python, JVM and Spark session and warmed up, then waits "
            "without touching the checkpoint, Kafka or the views (and holds no connection to "
            "them). When the driver dies, the standby takes over and starts the query from its "
            "checkpoint at once, where a fresh process would first start all of that (kill -9 to "
            "the views committing again took 25-40 s that way); a takeover counts as a restart "
            "(speed_max_restarts). The standby is started speed_standby_after_ready_seconds "
            "after the driver is ready, so its start-up (a core for tens of seconds) does not "
            "slow a replay, but it does slow running micro-batches a while after each start "
            "and takeover. Memory: each standby is one more driver JVM (spark_driver_memory of "
            "heap at most): two more with per-query drivers. Never for --available-now. On "
            "this machine a takeover commits 4-6 s after the kill (docs/speed-layer.md, "
            "Faults); off by default for its memory and CPU, on in CI's chaos run."
        ),
    )
    standby_after_ready_seconds: float = Field(
        default=30.0,
        ge=0,
        description="With speed_standby, a new standby is started this long after its driver "
        "said it is ready (after a start or a takeover): the driver's first micro-batches, a "
        "replay, get the cores first (a standby started at once made a takeover's first "
        "micro-batch take 12 s on 2 cores).",
    )
    metrics_port: int = Field(
        default=9410,
        ge=0,
        le=65535,
        description="A continuous `pos-speed run` (its supervisor process) serves OpenMetrics "
        "for Prometheus at bind_host:this/metrics: each query's Kafka lag (to the last stable "
        "offset), micro-batches, receipts, resends, conflicts, late and invalid records, "
        "driver up and restarts, standby up (docs/operations.md, Metrics). 0: no metrics port.",
    )

    @model_validator(mode="after")
    def _api_timeout_covers_a_request(self) -> SpeedSettings:
        """Kafka's admin client refuses a default.api.timeout.ms below request.timeout.ms:
        refused here, by the settings' names, rather than by the driver at its first batch."""
        if self.kafka_api_timeout_ms < self.kafka_request_timeout_ms:
            raise ValueError(
                f"speed_kafka_api_timeout_ms ({self.kafka_api_timeout_ms}) must be at least "
                f"speed_kafka_request_timeout_ms ({self.kafka_request_timeout_ms}): a call's "
                "deadline covers at least one request"
            )
        return self


class BatchSettings(_Section):
    """The batch layer (`pos-batch`, scheduled by dags/)."""

    model_config = SettingsConfigDict(env_prefix="POS_BATCH_")

    lookback_hours: float = Field(
        default=48.0,
        ge=0,
        description="A pinned run (`--delta-version`) recomputes whole UTC days back to its "
        "start minus this. Hourly runs fold every newly archived record into its own day, "
        "however late: what converges does not depend on this.",
    )
    vacuum_retain_hours: float = Field(
        default=168.0,
        ge=168.0,
        description="VACUUM keeps the master dataset's files this long: batch reruns pinned "
        "to an older table version (time travel) work within it. Delta refuses less than "
        "7 days by default.",
    )


class ServeSettings(_Section):
    """The serving layer (`pos-serve`, `make serve`)."""

    model_config = SettingsConfigDict(env_prefix="POS_SERVE_")

    port: int = Field(
        default=8000, ge=1, le=65535, description="HTTP API and dashboard (bind_host only)."
    )
    max_range_days: int = Field(
        default=31,
        ge=1,
        description="Largest time range one request may ask for (a day is 96 windows); "
        "larger ones are refused with 422 so one request cannot read a store's history.",
    )
    page_size: int = Field(
        default=100, ge=1, le=1000, description="Receipts per page when the caller names none."
    )
    timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Cassandra connect and request timeout of the serving layer; past it a "
        "request answers 503 with the reason instead of hanging.",
    )
    page_key: SecretStr = Field(
        default=SecretStr(""),
        description="Secret that signs the receipts' page tokens (every serving instance "
        "behind one address must share it); empty: a key generated once into "
        "$POS_STATE_DIR/serve/page.key.",
    )
    page_token_max_age_seconds: int = Field(
        default=3600,
        ge=1,
        description="A receipts page token older than this is refused with 410 Gone (start "
        "the listing again); so is one whose batch version is no longer served (a rebuild "
        "replaced it, and gc may have deleted its rows).",
    )
    dead_letter_scan_limit: int = Field(
        default=100_000,
        ge=1,
        description="Pipeline health counts dead letters by reason over at most this many "
        "rows (and says so when it stopped there).",
    )


_GROUP_ID = "Consumer group of the processor's instances: they share the input's partitions."
_METRICS_PORT = (
    "`run` serves OpenMetrics for Prometheus at bind_host:this/metrics: transactions "
    "committed and aborted, records, outputs, the watchdog's restarts. A second instance on "
    "the same host needs its own port. 0: no metrics port."
)


class ProcessorSettings(_Section):
    """What every transactional read-process-write processor is configured by
    (src/pos_lambda/transactional/processor.py): the alerts' and the deduplicated topic's
    sections."""

    group_id: str = Field(default="pos-processor", description=_GROUP_ID)
    instance_id: str = Field(
        default="1",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="Stable id of one processor instance, unique among those running: its "
        "transactional.id is pos-<processor>-<instance id> (pos-alerts-1, pos-receipts-1), "
        "so a restarted instance fences its predecessor.",
    )
    mode: Literal["exactly_once", "at_least_once"] = Field(
        default="exactly_once",
        description="exactly_once: outputs and input offsets in one Kafka transaction. "
        "at_least_once: no transactions, offsets committed after the outputs are acked "
        "(duplicates after a crash; for comparison only).",
    )
    transaction_max_ms: int = Field(
        default=100,
        ge=1,
        description="A transaction (or, at least once, an offset commit) closes this many ms "
        "after its first input message: the latency/throughput trade-off.",
    )
    transaction_max_messages: int = Field(
        default=1000, ge=1, description="... or after this many input messages, if sooner."
    )
    transaction_timeout_ms: int = Field(
        default=60_000,
        ge=1000,
        description="The broker aborts a transaction left open this long (an instance that "
        "died and is not restarted): read_committed readers of the output topic and the next "
        "owner of its partitions wait at most this.",
    )
    session_timeout_ms: int = Field(
        default=45_000,
        ge=6000,
        description="Consumer-group session timeout: a silent or stopped instance's "
        "partitions move to the others after this (static membership: a restarted instance "
        "with the same id takes them back at once).",
    )
    lease_ttl_s: int = Field(
        default=15,
        ge=3,
        le=3600,
        description="An instance holds a lease on its id in Cassandra (alerts_leases, a row "
        "per transactional.id), renewed every third of this: a second instance with the "
        "same id refuses to start (exit 5) while the holder renews; after a crash, the "
        "restarted instance waits at most this long for the dead holder's lease to expire.",
    )
    max_restarts_in_place: int = Field(
        default=5,
        ge=0,
        description="The watchdog restarts an instance whose Kafka call hung "
        "(librdkafka#5456) at most this many times in a row without a committed "
        "transaction in between; then it exits 6 for a supervisor to act (0: never).",
    )
    coordinator_wait_s: int = Field(
        default=300,
        ge=1,
        description="How long init_transactions and abort_transaction are retried, with "
        "backoff, while the transaction coordinator answers with retriable errors (moving, "
        "loading, a previous transaction still completing, a timed-out call to resume); "
        "then the instance exits 3 for its supervisor.",
    )
    refused_output_patience_s: int = Field(
        default=300,
        ge=0,
        description="An input record whose output the broker refuses (larger than the "
        "output topic's max.message.bytes) is replayed for this long, time to fix a limit "
        "set too low; then a dead letter with the reason goes to POS_TOPIC_DEAD_LETTERS in "
        "its place, so the partition does not stop (at once if the client can never send it).",
    )
    restore_stall_s: int = Field(
        default=120,
        ge=1,
        description="Rebuilding a partition's state on assignment fails when it has read "
        "nothing for this long; a slow rebuild that still advances goes on (and logs its "
        "progress) however long the partition.",
    )
    metrics_port: int = Field(default=0, ge=0, le=65535, description=_METRICS_PORT)


class AlertsSettings(ProcessorSettings):
    """The real-time alerts (`pos-alerts`)."""

    model_config = SettingsConfigDict(env_prefix="POS_ALERTS_")

    group_id: str = Field(default="pos-alerts", description=_GROUP_ID)
    high_value_threshold: Decimal = Field(
        default=Decimal("100.00"), description="Alert on a receipt whose total exceeds this."
    )
    large_return_threshold: Decimal = Field(
        default=Decimal("10.00"),
        ge=0,
        description="Alert on a receipt whose returned lines (negative quantities) are worth "
        "more than this.",
    )
    silence_minutes: float = Field(
        default=30.0,
        gt=0,
        description="Alert when a device's next receipt comes more than this many minutes of "
        "store hours after its previous one (event time: happened_at). Store hours are the "
        "store's own, from the stores table (pos-stores), read when the processor starts.",
    )
    store_opens_at: time = Field(
        default=time(7, 0),
        description="Default store hours for the silence rule, for stores not in the stores "
        "table: opening, UTC, every day.",
    )
    store_closes_at: time = Field(
        default=time(21, 0),
        description="Default store hours (stores not in the stores table): closing, UTC, "
        "after the opening on the same day.",
    )
    sink_group_id: str = Field(
        default="pos-alerts-sink", description="Consumer group of `pos-alerts sink`."
    )
    metrics_port: int = Field(default=9411, ge=0, le=65535, description=_METRICS_PORT)


class ReceiptsSettings(ProcessorSettings):
    """The deduplicated topic (`pos-receipts`): one record per receipt, the winner's."""

    model_config = SettingsConfigDict(env_prefix="POS_RECEIPTS_")

    group_id: str = Field(default="pos-receipts", description=_GROUP_ID)
    metrics_port: int = Field(default=9412, ge=0, le=65535, description=_METRICS_PORT)


_CRASH_POINTS = r"^(kill_after_produce|stop_after_produce)$"
_CRASH_POINT = (
    "Testing only: in a transactional processor's transaction numbered "
    "<processor>_crash_at_transaction that produced outputs, once they are on the broker and "
    "before the commit, SIGKILL (kill_after_produce) or SIGSTOP (stop_after_produce: a zombie "
    "to fence) the processor (pos-alerts, pos-receipts)."
)
_CRASH_AT = "Testing only: see the crash point above."


class FaultSettings(_Section):
    """Testing only: where a test or the chaos run makes a process die (pos_lambda.failpoints)."""

    model_config = SettingsConfigDict(env_prefix="POS_")

    speed_crash_point: str | None = Field(
        default=None,
        pattern=r"^(after_aggregates|after_raw_rows|after_receipt_keys)$",
        description="Testing only: SIGKILL the speed layer at this point of a micro-batch "
        "(after_aggregates, after_raw_rows, after_receipt_keys: its writes in order) to prove "
        "that the replay converges.",
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
    alerts_crash_point: str | None = Field(
        default=None, pattern=_CRASH_POINTS, description=_CRASH_POINT
    )
    alerts_crash_at_transaction: int = Field(default=1, ge=1, description=_CRASH_AT)
    receipts_crash_point: str | None = Field(
        default=None, pattern=_CRASH_POINTS, description=_CRASH_POINT
    )
    receipts_crash_at_transaction: int = Field(default=1, ge=1, description=_CRASH_AT)


class Settings(BaseSettings):
    """Endpoints, paths and tuning knobs of the pipeline, one frozen section each.

    Environment variables keep their flat names (POS_KAFKA_PORT is `settings.kafka.port`);
    so do the keyword overrides of `load_settings` and `with_overrides`.
    """

    model_config = SettingsConfigDict(env_prefix="POS_", frozen=True, extra="forbid")

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
        description="Local services bind here only. Anything but a loopback address is "
        "refused unless the Cassandra login and a Kafka SASL login are set "
        "(docs/deploy.md, Security).",
    )
    data_dir: Path = Field(
        default=PROJECT_ROOT / ".state" / "data",
        description="Master dataset and checkpoints. On a cluster, a path the driver and "
        "every executor see (a shared mount): a filesystem path, not yet a URI "
        "(s3a://bucket/x would arrive as s3a:/bucket/x).",
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    cassandra: CassandraSettings = Field(default_factory=CassandraSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    airflow: AirflowSettings = Field(default_factory=AirflowSettings)
    speed: SpeedSettings = Field(default_factory=SpeedSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    alerts: AlertsSettings = Field(default_factory=AlertsSettings)
    receipts: ReceiptsSettings = Field(default_factory=ReceiptsSettings)
    faults: FaultSettings = Field(default_factory=FaultSettings)

    @model_validator(mode="before")
    @classmethod
    def _sections_from_flat_names(cls, data: Any) -> Any:
        """Keyword overrides come by their flat names (kafka_port=..., as CLI flags and
        tests give them): each goes to its section, built from the environment with the
        overrides on top. An unknown name is refused, as a misspelt setting would
        otherwise be silently ignored."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        by_section: dict[str, dict[str, Any]] = {}
        for flat in [k for k in data if k not in cls.model_fields]:
            section, field = _section_of(flat)
            by_section.setdefault(section, {})[field] = data.pop(flat)
        for section, values in by_section.items():
            current = data.get(section)
            try:
                if isinstance(current, _Section):
                    data[section] = _replaced(current, values)
                else:
                    data[section] = SECTIONS[section](**{**(current or {}), **values})
            except ValidationError as exc:  # named as the user gave it, not as the field
                raise ValueError(explain(exc)) from None
        return data

    @model_validator(mode="after")
    def _exposed_needs_auth(self) -> Settings:
        """Refuse a bind_host other machines can reach unless clients authenticate."""
        if is_loopback(self.bind_host):
            return self
        missing = []
        if not (self.cassandra.username and self.cassandra.password.get_secret_value()):
            missing.append("POS_CASSANDRA_USERNAME and POS_CASSANDRA_PASSWORD")
        if not self.kafka.sasl:
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

    def with_overrides(self, **flat: object) -> Settings:
        """A copy with some settings replaced, by their flat names (`cassandra_port=9043`),
        validated like the environment's values; an unknown name raises."""
        top = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self)(**{**top, **flat})

    def environment(self) -> dict[str, str]:
        """The POS_* variables that make a child process build exactly these settings
        (secrets in clear: they go to the child's environment, never to a log)."""
        env = {}
        for name, value in self._flat_values():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[name] = str(value)
        return env

    def _flat_values(self) -> list[tuple[str, object]]:
        """(environment variable, value) of every setting."""
        values: list[tuple[str, object]] = []
        for name in type(self).model_fields:
            part = getattr(self, name)
            if isinstance(part, _Section):
                prefix = _env_prefix(type(part))
                values += [
                    (f"{prefix}{f}".upper(), getattr(part, f)) for f in type(part).model_fields
                ]
            else:
                values.append((f"POS_{name}".upper(), part))
        return values

    @property
    def spark_kafka_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (the Java client, `kafka.` prefixed)."""
        kafka = self.kafka
        opts = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": kafka.security_protocol,
        }
        if kafka.security_protocol.startswith("SASL_"):
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if kafka.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            # JAAS values are quoted strings; json.dumps escapes quotes and backslashes.
            login = (
                f"username={json.dumps(kafka.sasl_username)} "
                f"password={json.dumps(kafka.sasl_password.get_secret_value())}"
            )
            opts |= {
                "kafka.sasl.mechanism": kafka.sasl_mechanism,
                "kafka.sasl.jaas.config": f"{module} required {login};",
            }
        if kafka.ssl_ca_location:
            opts |= {
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": kafka.ssl_ca_location,
            }
        return opts

    @property
    def class_archive_dir(self) -> Path:
        return self.state_dir / "class-archives"

    def bounded(self) -> Settings:
        """These settings for a bounded run (a one-shot, a batch run): the driver's JVM
        options plus spark_bounded_java_options."""
        extra = self.spark.bounded_java_options.strip()
        if not extra:
            return self
        options = f"{self.spark.driver_java_options} {extra}".strip()
        return self.with_overrides(spark_driver_java_options=options)

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
        return self.kafka.bootstrap_servers or f"{self.bind_host}:{self.kafka.port}"

    @property
    def cassandra_contact_points(self) -> list[str]:
        raw = self.cassandra.hosts or self.bind_host
        return [h.strip() for h in raw.split(",") if h.strip()]


SECTIONS: dict[str, type[_Section]] = {
    name: field.default_factory  # type: ignore[misc]
    for name, field in Settings.model_fields.items()
    if field.default_factory is not None
}


def _flat_name(section: str, field: str) -> str:
    """The flat name of a section's field: its environment variable without POS_."""
    prefix = _env_prefix(SECTIONS[section])
    return (prefix.removeprefix("POS_") + field).lower()


FLAT_NAMES: dict[str, tuple[str, str]] = {
    _flat_name(section, field): (section, field)
    for section, cls in SECTIONS.items()
    for field in cls.model_fields
}


def _section_of(flat: str) -> tuple[str, str]:
    try:
        return FLAT_NAMES[flat]
    except KeyError:
        raise ValueError(
            f"unknown setting {flat!r} (`python -m pos_lambda.settings` lists them)"
        ) from None


def _replaced(section: _Section, values: dict[str, Any]) -> _Section:
    return type(section)(
        **{**{k: getattr(section, k) for k in type(section).model_fields}, **values}
    )


def explain(exc: ValidationError) -> str:
    """A settings error as the user set it: each bad value by its environment variable
    and flat name (`POS_ALERTS_MODE (alerts_mode): Input should be ...`)."""
    prefixes = {cls.__name__: _env_prefix(cls) for cls in SECTIONS.values()}
    prefix = prefixes.get(exc.title, "POS_")
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        if field:
            env = f"{prefix}{field}".upper()
            where = f"{env} ({env.removeprefix('POS_').lower()}): "
        else:
            where = ""
        got = f" (got {error['input']!r})" if field and "input" in error else ""
        lines.append(f"{where}{error['msg']}{got}")
    return "\n".join(lines)


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, with explicit overrides (CLI flags) on top."""
    return Settings(**cast(dict[str, Any], {k: v for k, v in overrides.items() if v is not None}))


def documented() -> list[tuple[str, str, str, str]]:
    """(section, environment variable, default, description) of every setting, in order."""
    rows = []
    sections: list[tuple[str, type[BaseSettings]]] = [("", Settings), *SECTIONS.items()]
    for section, cls in sections:
        prefix = _env_prefix(cls)
        for name, field in cls.model_fields.items():
            if section == "" and name in SECTIONS:
                continue
            default = field.get_default(call_default_factory=True)
            if isinstance(default, Path):
                default = _shown_path(default)
            shown = "" if default is None else str(default)
            rows.append(
                (section or "paths", f"{prefix}{name}".upper(), shown, field.description or "")
            )
    return rows


def _shown_path(path: Path) -> str:
    try:
        return "./" + str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def markdown_table() -> str:
    """The configuration table of the README (`make docs` writes it there).

    Settings that say the same thing share one row, at the first one's place: the
    transactional processors' common knobs (POS_ALERTS_MODE, POS_RECEIPTS_MODE), their
    output topics and crash points. A row per variable would repeat them word for word.
    """
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for section, env, default, description in documented():
        # An empty description says nothing shared: such a setting keeps a row of its own.
        rows.setdefault(description or env, []).append((section, env, default))
    lines = ["| section | variable | default | what it does |", "|---|---|---|---|"]
    for description, same in rows.items():
        sections = ", ".join(dict.fromkeys(section for section, _, _ in same))
        envs = ", ".join(f"`{env}`" for _, env, _ in same)
        defaults = list(dict.fromkeys(default for _, _, default in same))
        cell = ", ".join(f"`{d}`" if d else "(none)" for d in defaults) if any(defaults) else ""
        text = description.replace("|", "\\|") if description != same[0][1] else ""
        lines.append(f"| {sections} | {envs} | {cell} | {text} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pos_lambda.settings",
        description="Print the effective settings (from the POS_* environment) as JSON, "
        "secrets masked, or every setting as a Markdown table.",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="every setting with its default and meaning"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
    else:
        print(json.dumps(load_settings().model_dump(mode="json"), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
