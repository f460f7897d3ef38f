"""A local Spark standalone cluster (one master, one worker) from the pinned PySpark.

    pos-infra spark up       # master + worker on 127.0.0.1, await the worker's registration
    pos-infra spark status   # exit 0 only if the master is alive with the worker registered
    pos-infra spark down
    POS_SPARK_MASTER=spark://127.0.0.1:7077 pos-speed run --available-now

Not part of `pos-infra up`: the jobs run in `local[*]` by default. This is the cluster
path tried on one machine: the daemons are the same classes a real cluster runs
(`org.apache.spark.deploy.master.Master` and `...worker.Worker`), launched with the
pinned PySpark's own `bin/spark-class` (the pip package ships no `sbin/start-*.sh`), so
the driver, the executors and the jars travel as they would between hosts.

`daemon_env` and `master_argv`/`worker_argv` are pure; `start`, `stop` and `status` are
the shell. State under `<state dir>/spark/`: pid files, `logs/{master,worker}.log`,
`work/` (one directory per application with each executor's stdout/stderr) and an
empty `conf/` so no stray `spark-env.sh` or `spark-defaults.conf` is picked up.

Every socket binds `bind_host` (loopback): `--host` for the RPC ports and
SPARK_LOCAL_IP for the web UIs (Spark binds them to 0.0.0.0 otherwise) and for the
executors the worker launches. The daemons have no authentication
(`spark.authenticate` is off: anyone who reaches the master runs code as this user),
so a non-loopback bind_host is refused.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pos_lambda.adapters.java import find_java17
from pos_lambda.adapters.spark_session import spark_home
from pos_lambda.settings import Settings, is_loopback
from pos_lambda_dev.runtime.process import (
    ManagedProcess,
    ServiceError,
    await_running,
    launch_until_ready,
    port_open,
    require_free_disk,
    require_free_ports,
    wait_for,
)

READY_TIMEOUT_S = 120.0
MIN_FREE_DISK = 512 * 2**20
# Heap of each daemon; the executors get theirs from spark.executor.memory.
DAEMON_MEMORY = "512m"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class SparkPaths:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def process(self, daemon: str) -> ManagedProcess:
        return ManagedProcess(
            f"spark {daemon}",
            self.root / f"{daemon}.pid",
            self.root / "logs" / f"{daemon}.log",
            marker={"master": MASTER_CLASS, "worker": WORKER_CLASS}.get(daemon),
        )


def paths(settings: Settings) -> SparkPaths:
    return SparkPaths(settings.state_dir / "spark")


def master_url(settings: Settings) -> str:
    return f"spark://{settings.bind_host}:{settings.spark.master_port}"


def webui_url(settings: Settings) -> str:
    return f"http://{settings.bind_host}:{settings.spark.master_webui_port}"


def daemon_env(
    settings: Settings, base: Mapping[str, str], home: Path, java_home: Path
) -> dict[str, str]:
    """Environment of both daemons (and, through the worker, of its executors)."""
    sp = paths(settings)
    env = dict(base)
    # spark-class sources $SPARK_CONF_DIR/spark-env.sh and reads spark-defaults.conf:
    # an empty directory of our own keeps a user's or another install's out.
    for key in ("SPARK_CONF_DIR", "SPARK_ENV_LOADED", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS"):
        env.pop(key, None)
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(sp.conf.resolve()),
            "JAVA_HOME": str(java_home),
            # Web UIs bind here (else 0.0.0.0), and so do the executors' block managers.
            "SPARK_LOCAL_IP": settings.bind_host,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # The REST submission server (port 6066) stays off: nothing uses it.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
    )
    return env


def master_argv(settings: Settings, home: Path) -> list[str]:
    return [
        str(home / "bin" / "spark-class"),
        MASTER_CLASS,
        "--host", settings.bind_host,
        "--port", str(settings.spark.master_port),
        "--webui-port", str(settings.spark.master_webui_port),
    ]  # fmt: skip


def worker_argv(settings: Settings, home: Path) -> list[str]:
    return [
        str(home / "bin" / "spark-class"),
        WORKER_CLASS,
        "--host", settings.bind_host,
        "--port", str(settings.spark.worker_port),
        "--webui-port", str(settings.spark.worker_webui_port),
        "--cores", str(settings.spark.worker_cores),
        "--memory", settings.spark.worker_memory,
        # Executors' working directories and logs: under the state dir, not inside the venv.
        "--work-dir", str(paths(settings).work.resolve()),
        master_url(settings),
    ]  # fmt: skip


def master_state(settings: Settings, timeout: float = 3.0) -> dict[str, Any] | None:
    """The master's JSON state (`/json/`: workers, active and completed apps), or None."""
    try:
        with urllib.request.urlopen(f"{webui_url(settings)}/json/", timeout=timeout) as resp:
            state: dict[str, Any] = json.load(resp)
    except (OSError, ValueError):
        return None
    return state


def master_ready(settings: Settings) -> bool:
    state = master_state(settings)
    return state is not None and state.get("status") == "ALIVE"


def worker_ready(settings: Settings) -> bool:
    """The master lists our worker (host and port) as ALIVE: it can take executors."""
    state = master_state(settings)
    if state is None or state.get("status") != "ALIVE":
        return False
    return any(
        w.get("host") == settings.bind_host
        and w.get("port") == settings.spark.worker_port
        and w.get("state") == "ALIVE"
        for w in state.get("workers", [])
    )


def is_ready(settings: Settings) -> bool:
    return worker_ready(settings)


def start(settings: Settings) -> float:
    """Start the master, then the worker, unless they run; seconds until the worker is
    registered (0 if both already ran)."""
    if not is_loopback(settings.bind_host):
        raise ServiceError(
            "the local Spark standalone daemons run without authentication (anyone who "
            f"reaches the master runs code as this user), so they bind loopback only "
            f"(POS_BIND_HOST is {settings.bind_host!r}); use a secured Spark cluster instead"
        )
    sp = paths(settings)
    master, worker = sp.process("master"), sp.process("worker")
    master_ran = await_running(master, lambda: master_ready(settings), READY_TIMEOUT_S)
    # A worker that outlived its master registers again with the new one by itself.
    worker_ran = worker.pid() is not None
    if master_ran and await_running(worker, lambda: worker_ready(settings), READY_TIMEOUT_S):
        return 0.0
    home = spark_home()
    if not (home / "bin" / "spark-class").exists():
        raise ServiceError(f"spark: no bin/spark-class in {home}; reinstall with `make setup`")
    require_free_disk(sp.root, MIN_FREE_DISK, "spark")
    java_home = find_java17(settings.java_home).parent.parent
    sp.conf.mkdir(parents=True, exist_ok=True)
    sp.work.mkdir(parents=True, exist_ok=True)
    env = daemon_env(settings, os.environ, home, java_home)
    took = 0.0
    if not master_ran:
        took += _launch(
            settings, master, master_argv(settings, home), lambda: master_ready(settings), env,
            ports=[settings.spark.master_port, settings.spark.master_webui_port],
        )  # fmt: skip
    if worker_ran:
        took += _await_worker(settings, worker)
    else:
        took += _launch(
            settings, worker, worker_argv(settings, home), lambda: worker_ready(settings), env,
            ports=[settings.spark.worker_port, settings.spark.worker_webui_port],
        )  # fmt: skip
    return took


def _launch(
    settings: Settings,
    daemon: ManagedProcess,
    argv: list[str],
    ready: Callable[[], bool],
    env: dict[str, str],
    ports: list[int],
) -> float:
    """Start one daemon on free ports; seconds until `ready`."""
    require_free_ports(daemon.name, settings.bind_host, ports)
    return launch_until_ready(daemon, argv, ready, READY_TIMEOUT_S, env)


def _await_worker(settings: Settings, worker: ManagedProcess) -> float:
    t0 = time.monotonic()
    if not wait_for(lambda: worker_ready(settings), timeout=READY_TIMEOUT_S, interval=1.0):
        raise ServiceError(
            f"spark worker: running but not registered with {master_url(settings)}; "
            f"log tail:\n{worker.log_tail()}"
        )
    return time.monotonic() - t0


def stop(settings: Settings) -> bool:
    """Worker first (it kills its executors), then the master; False if neither ran."""
    sp = paths(settings)
    stopped_worker = sp.process("worker").stop(timeout=60)
    stopped_master = sp.process("master").stop(timeout=60)
    return stopped_worker or stopped_master


def status(settings: Settings) -> str:
    sp = paths(settings)
    pids = {d: sp.process(d).pid() for d in ("master", "worker")}
    if all(p is None for p in pids.values()):
        if port_open(settings.bind_host, settings.spark.master_port):
            return f"not managed here, but {master_url(settings)} answers"
        return "stopped"
    running = ", ".join(f"{d} pid {p}" for d, p in pids.items() if p is not None)
    if is_ready(settings):
        state = master_state(settings) or {}
        return (
            f"ready ({running}; {master_url(settings)}, UI {webui_url(settings)}; "
            f"{state.get('cores', '?')} cores, {len(state.get('activeapps', []))} active apps)"
        )
    return f"not ready ({running}; master {'alive' if master_ready(settings) else 'down'})"
