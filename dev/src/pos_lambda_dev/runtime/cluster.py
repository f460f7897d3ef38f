"""A replicated cluster on one machine: three KRaft nodes and three Cassandra nodes.

The nodes sit on the loopback addresses 127.0.0.1, .2 and .3 (Linux routes all of
127/8 to `lo`), as Cassandra's ccm runs them: each Cassandra node keeps the cluster's
one storage port, and each Kafka node is broker and controller at once, the three
controllers forming the KRaft quorum. The ports differ from the single node's, so both
can run side by side (the single node serves the other tests).

The pipeline reaches the cluster by settings alone: `client_settings` (or
`pos-infra cluster env`) gives the bootstrap list, the contact points, the port and the
replication factors. `layout`, `kafka_nodes`, `cassandra_nodes` and `client_settings`
are pure; the rest is the shell.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pos_lambda.adapters.java import find_java17
from pos_lambda.provision import ready
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import cassandra_service, kafka_service
from pos_lambda_dev.runtime.process import (
    ManagedProcess,
    ServiceError,
    launch_until_ready,
    port_open,
    require_free_disk,
    require_free_ports,
    wait_for,
)

NODES = 3
READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Layout:
    """Where the cluster's nodes listen, and how much memory each takes.

    Heaps follow ccm and Cassandra's own tests on small machines: 3 x 384 MiB for Kafka
    and 3 x 512 MiB for Cassandra (docs/cluster.md has the measured resident sizes).
    """

    hosts: tuple[str, ...] = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    cassandra_port: int = 19042
    cassandra_storage_port: int = 17000
    # JMX binds 127.0.0.1 whatever the node's address: one port per node.
    cassandra_jmx_ports: tuple[int, ...] = (17199, 17299, 17399)
    kafka_heap: str = "384m"
    cassandra_heap: str = "512M"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{h}:{self.kafka_port}" for h in self.hosts)


def kafka_nodes(layout: Layout) -> list[kafka_service.KafkaNode]:
    voters = ",".join(
        f"{i}@{h}:{layout.kafka_controller_port}" for i, h in enumerate(layout.hosts, 1)
    )
    return [
        kafka_service.KafkaNode(
            i,
            h,
            layout.kafka_port,
            layout.kafka_controller_port,
            voters,
            replicas=len(layout.hosts),
        )
        for i, h in enumerate(layout.hosts, 1)
    ]


def evenly_spaced_tokens(n: int) -> list[int]:
    """Murmur3 tokens that split the ring into n equal arcs (ccm's initial tokens)."""
    return [-(2**63) + i * (2**64 // n) for i in range(n)]


def cassandra_nodes(layout: Layout) -> list[cassandra_service.CassandraNode]:
    tokens = evenly_spaced_tokens(len(layout.hosts))
    return [
        cassandra_service.CassandraNode(
            host=h,
            native_port=layout.cassandra_port,
            storage_port=layout.cassandra_storage_port,
            jmx_port=jmx,
            seeds=layout.hosts,
            heap=layout.cassandra_heap,
            initial_token=token,
        )
        for h, jmx, token in zip(layout.hosts, layout.cassandra_jmx_ports, tokens, strict=True)
    ]


def client_overrides(layout: Layout) -> dict[str, object]:
    """The settings (flat names) that point every layer at the cluster."""
    return {
        "kafka_bootstrap_servers": layout.bootstrap_servers,
        "topic_replication_factor": len(layout.hosts),
        "cassandra_hosts": ",".join(layout.hosts),
        "cassandra_port": layout.cassandra_port,
        "cassandra_replication_factor": len(layout.hosts),
    }


def client_settings(settings: Settings, layout: Layout) -> Settings:
    return settings.with_overrides(**client_overrides(layout))


def shell_exports(layout: Layout) -> str:
    """`export POS_...` lines: `eval "$(pos-infra cluster env)"` points a shell at it."""
    return "".join(
        f"export POS_{name.upper()}={value}\n" for name, value in client_overrides(layout).items()
    )


# --- the shell --------------------------------------------------------------------------


def root(settings: Settings) -> Path:
    return settings.state_dir / "cluster"


def kafka_process(settings: Settings, node_id: int) -> ManagedProcess:
    return ManagedProcess.in_state_dir(
        f"kafka-{node_id}", root(settings) / f"kafka-{node_id}", marker="kafka.Kafka"
    )


def cassandra_process(settings: Settings, node_id: int) -> ManagedProcess:
    return ManagedProcess.in_state_dir(
        f"cassandra-{node_id}",
        root(settings) / f"cassandra-{node_id}",
        marker=cassandra_service.CASSANDRA_MAIN,
    )


def _say(say: Callable[[str], None] | None, msg: str) -> None:
    if say is not None:
        say(msg)


def kafka_brokers_up(settings: Settings, layout: Layout, timeout: float = 5.0) -> set[int]:
    """The node ids the cluster's metadata lists as brokers now."""
    from confluent_kafka import KafkaException

    from pos_lambda.adapters.kafka_clients import ConfluentClients

    try:
        # The port's admin logs at level 2: refused connections to a node still starting
        # are expected here.
        md = ConfluentClients(layout.bootstrap_servers).admin().list_topics(timeout=timeout)
    except KafkaException:
        return set()
    return set(md.brokers)


def kafka_ready(settings: Settings, layout: Layout) -> bool:
    """Every broker registered, and a transactional producer initialises (its state log
    at replication factor 3 and min ISR 2 exists)."""
    if len(kafka_brokers_up(settings, layout)) < len(layout.hosts):
        return False
    return ready.kafka_ready(client_settings(settings, layout), timeout=10.0)


def launch_kafka_node(settings: Settings, layout: Layout, node_id: int) -> bool:
    """Launch one KRaft node (formatting its storage once) without awaiting it: a node's
    broker listens only once the controller quorum has a majority, so the first node
    waits for the others. False if it already ran."""
    node = kafka_nodes(layout)[node_id - 1]
    proc = kafka_process(settings, node_id)
    if proc.pid() is not None:
        return False
    require_free_ports(proc.name, node.host, [node.port, node.controller_port])
    kp = kafka_service.KafkaPaths(root(settings) / f"kafka-{node_id}")
    require_free_disk(kp.root, kafka_service.MIN_FREE_DISK, proc.name)
    kp.root.mkdir(parents=True, exist_ok=True)
    kp.config.write_text(
        kafka_service.render_node_properties(node, kp.data, settings.topics.partitions)
    )
    kp.log4j.write_text(kafka_service.LOG4J2)
    java = find_java17(settings.java_home)
    # One id for the whole cluster: every node's storage is formatted with it.
    cluster_id = kafka_service.stored_cluster_id(kafka_service.KafkaPaths(root(settings)))
    kafka_service.format_storage(settings, java, kp, cluster_id)
    proc.launch(
        kafka_service.java_argv(
            settings, java, kp, ["kafka.Kafka", str(kp.config)], heap=layout.kafka_heap
        )
    )
    return True


def await_kafka_node(settings: Settings, layout: Layout, node_id: int) -> None:
    """Until the node's broker is in the cluster's metadata; its log tail if it died."""
    proc = kafka_process(settings, node_id)

    def registered() -> bool:
        if proc.pid() is None:
            raise ServiceError(f"{proc.name}: died during start-up; log tail:\n{proc.log_tail()}")
        return node_id in kafka_brokers_up(settings, layout)

    if not wait_for(registered, timeout=READY_TIMEOUT_S, interval=1.0):
        raise ServiceError(f"{proc.name}: not registered; log tail:\n{proc.log_tail()}")


def start_kafka_node(settings: Settings, layout: Layout, node_id: int) -> float:
    """Start one node of a running cluster (after a fault); seconds until registered."""
    t0 = time.monotonic()
    launch_kafka_node(settings, layout, node_id)
    await_kafka_node(settings, layout, node_id)
    return time.monotonic() - t0


def start_cassandra_node(settings: Settings, layout: Layout, node_id: int) -> float:
    """Start one Cassandra node; seconds until its CQL port answers."""
    node = cassandra_nodes(layout)[node_id - 1]
    proc = cassandra_process(settings, node_id)
    if proc.pid() is not None:
        return 0.0
    require_free_ports(proc.name, node.host, [node.native_port, node.storage_port])
    require_free_ports(proc.name, "127.0.0.1", [node.jmx_port])
    node_root = root(settings) / f"cassandra-{node_id}"
    require_free_disk(node_root, cassandra_service.MIN_FREE_DISK, proc.name)
    node_root.mkdir(parents=True, exist_ok=True)
    (node_root / "cassandra.yaml").write_text(cassandra_service.render_node_yaml(node, node_root))
    (node_root / "logback.xml").write_text(cassandra_service.LOGBACK)
    java = find_java17(settings.java_home)
    classpath, jamm = cassandra_service.jar_classpath(settings)
    argv = [
        str(java),
        *cassandra_service.node_jvm_options(node, node_root, jamm),
        "-cp",
        classpath,
        cassandra_service.CASSANDRA_MAIN,
    ]
    return launch_until_ready(
        proc, argv, lambda: port_open(node.host, node.native_port), READY_TIMEOUT_S
    )


def cassandra_nodes_up(settings: Settings, layout: Layout, timeout: float = 10.0) -> set[str]:
    """The addresses the ring, as a driver sees it from any live node, holds as up."""
    from pos_lambda.adapters import cassandra_client

    try:
        with cassandra_client.open_session(
            client_settings(settings, layout), keyspace=False, timeout=timeout
        ) as session:
            return {h.address for h in session.cluster.metadata.all_hosts() if h.is_up}
    except Exception:  # NoHostAvailable, OperationTimedOut: none up, whatever the cause
        return set()


def await_cassandra_ring(settings: Settings, layout: Layout, hosts: Sequence[str]) -> None:
    """Until the ring, seen through the driver, holds every one of `hosts` as up."""
    if not wait_for(
        lambda: set(hosts) <= cassandra_nodes_up(settings, layout),
        timeout=READY_TIMEOUT_S,
        interval=1.0,
    ):
        raise ServiceError(
            f"cassandra cluster: {sorted(set(hosts) - cassandra_nodes_up(settings, layout))} "
            "not up in the ring"
        )


def up(settings: Settings, layout: Layout, say: Callable[[str], None] | None = None) -> float:
    """Start every node, then await the whole cluster; seconds taken."""
    t0 = time.monotonic()
    # The controllers form a quorum only together: launch all, then await each.
    for node_id in range(1, NODES + 1):
        launched = launch_kafka_node(settings, layout, node_id)
        _say(say, f"kafka-{node_id}: {'launched' if launched else 'running'}")
    for node_id in range(1, NODES + 1):
        await_kafka_node(settings, layout, node_id)
    if not wait_for(lambda: kafka_ready(settings, layout), READY_TIMEOUT_S, interval=1.0):
        raise ServiceError(
            "kafka cluster: the brokers listen but a transactional producer cannot "
            f"initialise; log tail of kafka-1:\n{kafka_process(settings, 1).log_tail()}"
        )
    _say(say, f"kafka: 3 brokers ready at {layout.bootstrap_servers}")
    # Cassandra nodes join one at a time, as the ring wants them to.
    for node_id in range(1, NODES + 1):
        took = start_cassandra_node(settings, layout, node_id)
        _say(say, f"cassandra-{node_id}: " + (f"CQL in {took:.1f}s" if took else "running"))
    await_cassandra_ring(settings, layout, layout.hosts)
    _say(say, f"cassandra: 3 nodes up in the ring ({','.join(layout.hosts)})")
    return time.monotonic() - t0


def down(settings: Settings) -> list[str]:
    """Stop every node, Cassandra's first; the names stopped.

    The nodes of a kind stop together. One by one, the last brokers waited out their
    timeout: a KRaft broker's controlled shutdown needs the controller quorum, which
    leaves with its peers (all six nodes one after another took 83 s here; together, 20 s)."""
    from concurrent.futures import ThreadPoolExecutor

    stopped = []
    for kind, proc_of, timeout in (
        ("cassandra", cassandra_process, 90.0),
        ("kafka", kafka_process, 60.0),
    ):
        procs = [proc_of(settings, n) for n in range(1, NODES + 1)]
        with ThreadPoolExecutor(max_workers=NODES) as pool:
            ran = list(pool.map(ManagedProcess.stop, procs, [timeout] * NODES))
        stopped += [f"{kind}-{n}" for n, was in enumerate(ran, start=1) if was]
    return stopped


def status(settings: Settings, layout: Layout) -> list[tuple[str, str]]:
    """(node, state) of every node, then of each service as its clients see it."""
    lines = []
    for kind, proc_of in (("kafka", kafka_process), ("cassandra", cassandra_process)):
        for node_id in range(1, NODES + 1):
            pid = proc_of(settings, node_id).pid()
            lines.append(
                (f"{kind}-{node_id}", "stopped" if pid is None else f"running (pid {pid})")
            )
    brokers = kafka_brokers_up(settings, layout)
    lines.append(("kafka", f"{len(brokers)}/{NODES} brokers in the metadata"))
    ring = cassandra_nodes_up(settings, layout)
    lines.append(("cassandra", f"{len(ring)}/{NODES} nodes up in the ring"))
    return lines


def wipe(settings: Settings) -> None:
    """Delete the stopped cluster's data (a fresh cluster on the next `up`)."""
    import shutil

    if any(
        p.pid() is not None
        for n in range(1, NODES + 1)
        for p in (kafka_process(settings, n), cassandra_process(settings, n))
    ):
        raise ServiceError("cluster: stop it first (`pos-infra cluster down`)")
    shutil.rmtree(root(settings), ignore_errors=True)


def nodetool(settings: Settings, layout: Layout, node_id: int, *args: str) -> str:
    """Run Cassandra's nodetool (in `cassandra-all`) against one node over JMX; its output.

    Fault tests use it for what the CQL protocol cannot do: turn hinted handoff off or
    on (`disablehandoff`), drop stored hints (`truncatehints`), flush."""
    import subprocess

    java = find_java17(settings.java_home)
    classpath, _ = cassandra_service.jar_classpath(settings)
    quiet = root(settings) / "nodetool" / "logback.xml"
    quiet.parent.mkdir(parents=True, exist_ok=True)
    quiet.write_text('<configuration><root level="WARN"/></configuration>\n')
    argv = [
        str(java),
        f"-Dlogback.configurationFile={quiet}",
        # The client's own module flags (Cassandra's jvm17-clients.options): the tool
        # loads the server's utility classes.
        *cassandra_service.JDK17_MODULE_FLAGS,
        "-Xmx128m",
        f"-Dcassandra.logdir={root(settings) / 'nodetool'}",
        "-cp",
        classpath,
        "org.apache.cassandra.tools.NodeTool",
        "-h",
        "127.0.0.1",
        "-p",
        str(layout.cassandra_jmx_ports[node_id - 1]),
        *args,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ServiceError(
            f"nodetool {' '.join(args)} on cassandra-{node_id} failed:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done.stdout
