"""Single-node Kafka (KRaft, combined broker + controller) as a local JVM process.

`render_server_properties` is pure; `start`, `stop` and `status` are the shell.
Storage is formatted once (the cluster id lives in the state directory), so
restarts keep topics and committed offsets. Readiness means what clients need:
metadata answers *and* a transactional producer can initialise (which forces the
transaction coordinator and its state log to exist).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pos_lambda.adapters.java import find_java17
from pos_lambda.provision import ready
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime.process import (
    ManagedProcess,
    ServiceError,
    await_running,
    launch_until_ready,
    port_open,
    require_free_disk,
    require_free_ports,
)

READY_TIMEOUT_S = 120.0
# Partitions of `__transaction_state`: a transactional id's coordinator leads partition
# abs(hash(id)) % this (the cluster chaos finds it so).
TRANSACTION_STATE_PARTITIONS = 4
MIN_FREE_DISK = 512 * 2**20


@dataclass(frozen=True)
class KafkaPaths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def cluster_id(self) -> Path:
        return self.root / "cluster.id"


def paths(settings: Settings) -> KafkaPaths:
    return KafkaPaths(settings.state_dir / "kafka")


def process(settings: Settings) -> ManagedProcess:
    return ManagedProcess.in_state_dir("kafka", paths(settings).root, marker="kafka.Kafka")


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node (broker and controller in one process) as this machine runs it."""

    node_id: int
    host: str
    port: int
    controller_port: int
    voters: str  # controller.quorum.voters: id@host:port of every controller
    replicas: int  # replication factor of topics and internal topics: 1 alone, 3 in a cluster


def single_node(settings: Settings) -> KafkaNode:
    host, cport = settings.bind_host, settings.kafka.controller_port
    return KafkaNode(1, host, settings.kafka.port, cport, f"1@{host}:{cport}", replicas=1)


def render_server_properties(settings: Settings, data_dir: Path) -> str:
    return render_node_properties(single_node(settings), data_dir, settings.topics.partitions)


def render_node_properties(node: KafkaNode, data_dir: Path, partitions: int) -> str:
    host = node.host
    # A replicated cluster keeps acknowledged writes when one node goes: acks=all waits
    # for two in-sync replicas of three, and a replica that missed writes never leads.
    min_isr = 2 if node.replicas >= 3 else 1
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": node.voters,
        "listeners": f"PLAINTEXT://{host}:{node.port},CONTROLLER://{host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": str(partitions),
        # Every internal topic must accept the cluster's replication factor, or the
        # transaction coordinator and consumer groups never become available.
        "offsets.topic.replication.factor": str(node.replicas),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(node.replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS),
        "share.coordinator.state.topic.replication.factor": str(node.replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "default.replication.factor": str(node.replicas),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        **(
            {
                # A killed broker is fenced, and its partitions led elsewhere, after 3 s
                # without heartbeats rather than 9 (as Cassandra's phi_convict_threshold 5
                # here): a small cluster on one machine, not a WAN.
                "broker.heartbeat.interval.ms": "500",
                "broker.session.timeout.ms": "3000",
            }
            if node.replicas >= 3
            else {}
        ),
        # Consumers in tests join alone; do not wait 3 s for company.
        "group.initial.rebalance.delay.ms": "0",
        # Topics are created explicitly with their partition counts (infra.topics).
        "auto.create.topics.enable": "false",
        # Simulated receipts carry event-time timestamps far from the wall clock;
        # neither retention nor the timestamp guard may drop them.
        "log.retention.ms": "-1",
        "log.message.timestamp.before.max.ms": str(2**63 - 1),
        "log.message.timestamp.after.max.ms": str(2**63 - 1),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


LOG4J2 = """\
# Broker logs go to the console log the launcher captures; keep them readable.
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


def new_cluster_id(draw: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded.

    Like Kafka's own `Uuid.randomUuid`, an id whose text starts with "-" is drawn
    again: one in 64 does, and command-line parsers (the storage tool's among them)
    read it as an option rather than as the id.
    """
    while True:
        cid = base64.urlsafe_b64encode(draw().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def stored_cluster_id(kp: KafkaPaths) -> str:
    if kp.cluster_id.exists():
        return kp.cluster_id.read_text().strip()
    cid = new_cluster_id()
    kp.cluster_id.parent.mkdir(parents=True, exist_ok=True)
    kp.cluster_id.write_text(cid)
    return cid


def _classpath(settings: Settings) -> str:
    jars = settings.jars_dir / "kafka"
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise ServiceError(f"Kafka jars missing in {jars}: run `make jars` first.")
    return str(jars / "*")


def java_argv(
    settings: Settings, java: Path, kp: KafkaPaths, main: list[str], heap: str | None = None
) -> list[str]:
    heap = heap or settings.kafka.heap
    return [
        str(java),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        f"-Dlog4j2.configurationFile={kp.log4j}",
        f"-Dkafka.logs.dir={kp.root / 'logs'}",
        "-cp",
        _classpath(settings),
        *main,
    ]


def format_storage(
    settings: Settings, java: Path, kp: KafkaPaths, cluster_id: str | None = None
) -> None:
    """Format the KRaft log directories once, with the cluster id kept in `kp` (or the
    one every node of a cluster shares)."""
    import subprocess

    if (kp.data / "meta.properties").exists():
        return
    argv = java_argv(
        settings,
        java,
        kp,
        # `--cluster-id=ID` in one word: an id an older checkout stored may start
        # with "-", and as a separate word the tool would read it as an option.
        [
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id or stored_cluster_id(kp)}",
            f"--config={kp.config}",
        ],
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise ServiceError(f"kafka: formatting storage failed:\n{done.stdout}\n{done.stderr}")


def is_ready(settings: Settings, timeout: float = 5.0) -> bool:
    """Metadata answers and a transactional producer can initialise. The product's probe
    (`pos-provision ready kafka`), after a quick look at the local port."""
    if not port_open(settings.bind_host, settings.kafka.port):
        return False
    return ready.kafka_ready(settings, timeout)


def write_config_files(settings: Settings, kp: KafkaPaths) -> None:
    """The broker's server.properties and log configuration, rewritten on every start."""
    kp.root.mkdir(parents=True, exist_ok=True)
    kp.config.write_text(render_server_properties(settings, kp.data))
    kp.log4j.write_text(LOG4J2)


def start(settings: Settings) -> float:
    """Start the broker unless it runs; returns seconds until ready (0 if it already ran)."""
    proc = process(settings)
    if await_running(proc, lambda: is_ready(settings), READY_TIMEOUT_S):
        return 0.0
    require_free_ports(
        "kafka", settings.bind_host, [settings.kafka.port, settings.kafka.controller_port]
    )
    kp = paths(settings)
    require_free_disk(kp.root, MIN_FREE_DISK, "kafka")
    java = find_java17(settings.java_home)
    write_config_files(settings, kp)
    format_storage(settings, java, kp)
    argv = java_argv(settings, java, kp, ["kafka.Kafka", str(kp.config)])
    return launch_until_ready(proc, argv, lambda: is_ready(settings), READY_TIMEOUT_S)


def stop(settings: Settings) -> bool:
    return process(settings).stop(timeout=60)


def status(settings: Settings) -> str:
    pid = process(settings).pid()
    if pid is None:
        if port_open(settings.bind_host, settings.kafka.port):
            # Someone else's broker (another checkout, a container's host): ready all
            # the same when it serves, so `pos-infra status kafka` can be a health check.
            ready = "ready" if is_ready(settings) else "starting (not ready)"
            return f"{ready} (not managed here: {settings.bootstrap_servers})"
        return "stopped"
    ready = "ready" if is_ready(settings) else "starting (not ready)"
    return f"{ready} (pid {pid}, {settings.bootstrap_servers})"
