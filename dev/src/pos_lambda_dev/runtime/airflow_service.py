"""Local Airflow 3 (the batch layer's scheduler) as four processes on 127.0.0.1.

    pos-infra airflow up        # migrate the metadata DB, start, await health, print login
    pos-infra airflow status    # exit 0 only if every component is healthy
    pos-infra airflow down      # and every Airflow a killed test run left (below)
    eval "$(pos-infra airflow env)" && airflow dags list   # the same config by hand

`child_env` is pure; `start`, `stop` and `status` are the shell. AIRFLOW_HOME is
`<state dir>/airflow`: the SQLite metadata DB, the `airflow.cfg` Airflow writes on first
use (with its generated Fernet key and JWT secret), task logs under `logs/`, and one
pid file and console log (`logs/<component>.log`) per component. The configuration
that matters is passed as `AIRFLOW__*` variables, so it follows the settings on every
start and never goes stale in a file.

Why api-server, scheduler, dag-processor and triggerer as separate processes rather
than `airflow standalone`: standalone pipes all four through one parent (which only
stops them on Ctrl-C, not SIGTERM), decides readiness by a timer and starts the log
servers bound to every interface; separate processes give a pid file, a log and a
health entry per component. SQLite with the LocalExecutor is accepted by Airflow 3
(standalone forces exactly that) and fine for one developer; use PostgreSQL for
anything real (`POS_AIRFLOW_SQL_ALCHEMY_CONN`).

An Airflow of its own (an integration test's: its own state dir and port) is started
inside `owned`, which keeps it from outliving the run that started it: it is registered
under the state dir (`airflow-runs/`, a link to its AIRFLOW_HOME), so that `pos-infra
airflow down` and `pos-infra down` stop it from its pid files, and a watcher process
stops it as soon as that run ends, however it ends (kill -9 included, where no
`finally` runs): the run holds a pipe to the watcher open, and the kernel closes it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pos_lambda.adapters.java import find_java17
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime.process import (
    ManagedProcess,
    ServiceError,
    require_free_disk,
    require_free_ports,
    wait_for,
)

READY_TIMEOUT_S = 180.0
MIGRATE_TIMEOUT_S = 600.0
# How long a writer of the SQLite metadata DB waits for its lock (see child_env).
SQLITE_LOCK_TIMEOUT_SECONDS = 60
MIN_FREE_DISK = 512 * 2**20
SPARK_CONN_ID = "spark_pos"
# The batch DAGs' pool: one slot, so a recompute, a backfill run and the master
# dataset's maintenance never run at the same time (dags/pos_batch.py).
BATCH_POOL = "pos_batch"
SIMPLE_AUTH_MANAGER = (
    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
)

# Start order; `stop` goes the other way round, scheduler first, so nothing new is queued
# while the rest shut down. The health endpoint reports the last three by these keys.
COMPONENTS: dict[str, list[str]] = {
    "api-server": ["api-server"],
    # --skip-serve-logs: the log servers bind every interface (not configurable) and are
    # only needed when task logs live on another machine; here the API server reads the
    # log files directly.
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
}
HEALTH_KEYS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
# Under the state dir: a link per Airflow of its own that runs (`owned`), to its home.
RUNS_DIR = "airflow-runs"
# How long the watcher of an owned Airflow may take to stop it, once its run has ended.
WATCHER_EXIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class AirflowPaths:
    root: Path  # AIRFLOW_HOME

    @property
    def db(self) -> Path:
        return self.root / "airflow.db"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def passwords(self) -> Path:
        return self.root / "simple_auth_manager_passwords.json.generated"

    def process(self, component: str) -> ManagedProcess:
        return ManagedProcess(
            f"airflow {component}",
            self.root / f"{component}.pid",
            self.log_dir / f"{component}.log",
            marker="airflow",  # `airflow <component>`, or its process title
        )


def paths(settings: Settings) -> AirflowPaths:
    return AirflowPaths(settings.state_dir / "airflow")


def processes(settings: Settings) -> dict[str, ManagedProcess]:
    ap = paths(settings)
    return {name: ap.process(name) for name in COMPONENTS}


def base_url(settings: Settings) -> str:
    return f"http://{settings.bind_host}:{settings.airflow.port}"


def venv_bin() -> Path:
    """The bin dir of the running interpreter's environment (not resolved: a venv's
    `python` is a symlink to the base interpreter)."""
    return Path(sys.executable).parent


def child_env(
    settings: Settings,
    base: Mapping[str, str],
    bin_dir: Path,
    java_home: Path | None = None,
) -> dict[str, str]:
    """The environment of every Airflow process: `base` plus the configuration."""
    ap = paths(settings)
    url = base_url(settings)
    # SQLite admits one writer at a time (scheduler, API server, DAG processor, task
    # runners): a writer waits up to `timeout` s for the lock, 5 s by Python's default, and
    # a trigger through the API failed with "Database error" after 5 s as a task's state
    # changes held it (CI).
    sql_conn = settings.airflow.sql_alchemy_conn or (
        f"sqlite:///{ap.db.resolve()}?timeout={SQLITE_LOCK_TIMEOUT_SECONDS}"
    )
    path = base.get("PATH", "/usr/bin:/bin")
    if not path.startswith(f"{bin_dir}:"):
        path = f"{bin_dir}:{path}"
    env = dict(base)
    env.update(
        {
            "AIRFLOW_HOME": str(ap.root.resolve()),
            # Airflow starts its own parts and task runners as `airflow` from PATH, and
            # SparkSubmitOperator runs `spark-submit`: both must be this environment's.
            "PATH": path,
            "PYSPARK_PYTHON": str(bin_dir / "python"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(settings.airflow.dags_dir.resolve()),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(settings.airflow.parallelism),
            "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{settings.airflow.admin_user}:admin",
            # Task runners report to the Execution API; its default URL assumes
            # localhost:8080, wrong as soon as the port is changed.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
            "AIRFLOW__API__HOST": settings.bind_host,
            "AIRFLOW__API__PORT": str(settings.airflow.port),
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API__WORKERS": "1",
            # Two cores: one parser process, and new DAG files show up within 30 s
            # instead of the default 5 minutes.
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            # A dead task is found in one of two ways, then run again. One whose
            # process died (the OOM killer) by its missing heartbeats: task runners here
            # are local and heartbeat every few seconds, so 2 minutes of silence is
            # death, not load (default 5). One a dead scheduler had queued (killed with
            # its LocalExecutor workers) by the check for orphaned tasks, which resets
            # it once that scheduler's own heartbeat is 30 s old: every 15 s, not every
            # 5 minutes (the chaos run's scheduler kill waited 5 minutes for it, then
            # 63 s at a check every minute). The check is one small query.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "120",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
            # Airflow 3 creates no default connections, and SparkSubmitOperator without
            # a connection silently submits to master `yarn`. A connection from the
            # environment needs no DB write and follows POS_SPARK_MASTER on each start;
            # JSON, because `local[*]` does not survive the URI form.
            f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps(
                {"conn_type": "spark", "host": settings.spark.master}
            ),
        }
    )
    if java_home is not None:
        env["JAVA_HOME"] = str(java_home)
    return env


def _env(settings: Settings) -> dict[str, str]:
    bin_dir = venv_bin()
    if not (bin_dir / "airflow").exists():
        raise ServiceError(
            f"airflow: not installed in {bin_dir.parent}; run `make setup` "
            "(installs the project with its `airflow` extra)."
        )
    try:
        java_home: Path | None = find_java17(settings.java_home).parent.parent
    except ServiceError:
        java_home = None  # Airflow runs without it; only Spark tasks need a JDK
    return child_env(settings, os.environ, bin_dir, java_home)


def health(settings: Settings, timeout: float = 3.0) -> dict[str, str] | None:
    """Component -> status from `/api/v2/monitor/health` (no login needed), or None."""
    try:
        with urllib.request.urlopen(
            f"{base_url(settings)}/api/v2/monitor/health", timeout=timeout
        ) as resp:
            body = json.load(resp)
    except (OSError, ValueError):
        return None
    return {k: str((body.get(k) or {}).get("status")) for k in HEALTH_KEYS}


def is_ready(settings: Settings) -> bool:
    h = health(settings)
    return h is not None and all(s == "healthy" for s in h.values())


def login(settings: Settings) -> tuple[str, str] | None:
    """(user, password) of the admin, once the API server has generated the password."""
    user = settings.airflow.admin_user
    try:
        passwords = json.loads(paths(settings).passwords.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return (user, passwords[user]) if user in passwords else None


def _migrate(env: dict[str, str], ap: AirflowPaths) -> None:
    """Create or upgrade the metadata DB; the first run also writes airflow.cfg with its
    generated secrets, so it must finish before the components start (else each would
    write its own JWT secret and tasks could not authenticate)."""
    try:
        done = subprocess.run(
            ["airflow", "db", "migrate"],
            env=env,
            cwd=ap.root,
            capture_output=True,
            text=True,
            timeout=MIGRATE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(f"airflow: `airflow db migrate` took over {exc.timeout:.0f}s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise ServiceError(f"airflow: `airflow db migrate` failed:\n{tail}")


def _ensure_pool(env: dict[str, str], ap: AirflowPaths) -> None:
    """Create (or resize to) the batch DAGs' one-slot pool: a task in a pool that does
    not exist is never scheduled."""
    done = subprocess.run(
        ["airflow", "pools", "set", BATCH_POOL, "1", "batch layer: one Spark job at a time"],
        env=env,
        cwd=ap.root,
        capture_output=True,
        text=True,
        timeout=MIGRATE_TIMEOUT_S,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise ServiceError(f"airflow: could not create the pool {BATCH_POOL}:\n{tail}")


def _diagnosis(settings: Settings, procs: dict[str, ManagedProcess]) -> str:
    """Health, dead components and the log tails of the dead or unhealthy ones."""
    dead = [name for name, p in procs.items() if p.pid() is None]
    h = health(settings)
    sick = [k.replace("_", "-") for k, s in (h or {}).items() if s != "healthy"]
    show = dead or [n for n in sick if n in procs] or list(procs)
    tails = "\n".join(f"--- {procs[n].log_file} ---\n{procs[n].log_tail(20)}" for n in show)
    return (
        f"health: {h if h is not None else 'not answering'}; "
        f"not running: {', '.join(dead) or 'none'}\n{tails}"
    )


def start(settings: Settings) -> float:
    """Start Airflow unless it runs; seconds until healthy (0 if it already ran)."""
    procs = processes(settings)
    running = [name for name, p in procs.items() if p.pid() is not None]
    if len(running) == len(procs):
        if wait_for(lambda: is_ready(settings), timeout=READY_TIMEOUT_S, interval=1.0):
            return 0.0
        raise ServiceError(f"airflow: running but not healthy; {_diagnosis(settings, procs)}")
    if running:
        # A component died: restart all four rather than mix old and new processes.
        stop(settings)
    require_free_ports("airflow", settings.bind_host, [settings.airflow.port])
    ap = paths(settings)
    require_free_disk(ap.root, MIN_FREE_DISK, "airflow")
    if not settings.airflow.dags_dir.is_dir():
        raise ServiceError(f"airflow: DAGs folder {settings.airflow.dags_dir} does not exist")
    env = _env(settings)
    t0 = time.monotonic()
    _migrate(env, ap)
    _ensure_pool(env, ap)
    for name, args in COMPONENTS.items():
        procs[name].launch(["airflow", *args], env=env)

    def ready_or_dead() -> bool:
        dead = [name for name, p in procs.items() if p.pid() is None]
        if dead:
            diagnosis = _diagnosis(settings, procs)
            stop(settings)
            raise ServiceError(f"airflow: {', '.join(dead)} died during start-up; {diagnosis}")
        return is_ready(settings)

    if not wait_for(ready_or_dead, timeout=READY_TIMEOUT_S, interval=1.0):
        raise ServiceError(
            f"airflow: not healthy after {READY_TIMEOUT_S:.0f}s; {_diagnosis(settings, procs)}"
        )
    return time.monotonic() - t0


def start_component(settings: Settings, name: str) -> bool:
    """Start one component that is not running, beside the others, as a process
    manager restarts a dead service (the chaos run's scheduler kill); False if it ran."""
    proc = processes(settings)[name]
    if proc.pid() is not None:
        return False
    proc.launch(["airflow", *COMPONENTS[name]], env=_env(settings))
    return True


def stop(settings: Settings) -> bool:
    """Stop every component (scheduler first); False if none was running."""
    return stop_home(paths(settings))


def stop_home(home: AirflowPaths) -> bool:
    """Stop the components whose pid files are in `home` (scheduler first); False if
    none was running."""
    stopped = False
    for name in reversed(COMPONENTS):
        stopped |= home.process(name).stop(timeout=60)
    return stopped


def register(settings: Settings, instance: Settings) -> Path:
    """Record `instance`'s Airflow (its own state dir) under `settings`' state dir, where
    `stop_all` finds it: a link to its AIRFLOW_HOME, which is created if need be."""
    home = paths(instance).root
    home.mkdir(parents=True, exist_ok=True)
    runs = settings.state_dir / RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    link = runs / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    link.symlink_to(home.resolve(), target_is_directory=True)
    return link


def stop_all(settings: Settings) -> list[tuple[Path, bool]]:
    """Stop the state dir's Airflow and every one registered there (`register`): each
    home, and whether something of it ran (the state dir's own is always named; a
    registered one only when it ran). Registrations are dropped, stopped or stale."""
    out = [(paths(settings).root, stop(settings))]
    runs = settings.state_dir / RUNS_DIR
    for link in sorted(runs.iterdir()) if runs.is_dir() else []:
        # A home that is gone (its tmp dir cleaned) has no pid file: nothing to stop.
        if stop_home(AirflowPaths(link)):
            out.append((link.resolve(), True))
        link.unlink(missing_ok=True)
    return out


@contextmanager
def owned(settings: Settings, instance: Settings) -> Iterator[None]:
    """For an Airflow of its own (`instance`: its own state dir and port), started in
    the block: it never outlives the calling process. Registered under `settings`' state
    dir (`pos-infra airflow down` stops it), stopped when the block ends, and stopped by
    a watcher process when the caller ends without ending the block (kill -9, SIGTERM).

    The watcher (a session of its own, so a signal to the caller's process group spares
    it) waits for EOF on a pipe whose only write end the caller holds: the kernel closes
    it when the caller ends, however it ends. Python's pipes are not inherited by the
    processes it starts, so no Airflow component keeps it open."""
    home = paths(instance)
    link = register(settings, instance)
    home.log_dir.mkdir(parents=True, exist_ok=True)
    read, write = os.pipe()
    try:
        with open(home.log_dir / "watcher.log", "ab") as log:
            watcher = subprocess.Popen(
                [sys.executable, "-m", __name__, "watch", str(home.root.resolve()), str(link)],
                stdin=read,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except BaseException:
        os.close(write)
        link.unlink(missing_ok=True)
        raise
    finally:
        os.close(read)
    try:
        yield
    finally:
        try:
            stop_home(home)
        finally:
            os.close(write)  # the watcher finds nothing running and leaves
            link.unlink(missing_ok=True)
            watcher.wait(timeout=WATCHER_EXIT_TIMEOUT_S)


def _watch(home: Path, link: Path) -> int:
    """The watcher of an owned Airflow: once stdin ends (its run ended), stop it."""
    while sys.stdin.buffer.read(4096):
        pass  # nobody writes: only the end counts
    if stop_home(AirflowPaths(home)):
        print(f"airflow: stopped the one at {home}: the run that started it has ended", flush=True)
    link.unlink(missing_ok=True)
    return 0


def status(settings: Settings) -> str:
    procs = processes(settings)
    pids = {name: p.pid() for name, p in procs.items()}
    if all(pid is None for pid in pids.values()):
        if health(settings) is not None:
            return f"not managed here, but {base_url(settings)} answers"
        return "stopped"
    listed = ", ".join(f"{n} {'pid ' + str(pid) if pid else 'STOPPED'}" for n, pid in pids.items())
    h = health(settings)
    if h is not None and all(s == "healthy" for s in h.values()) and all(pids.values()):
        return f"ready ({listed}; {base_url(settings)})"
    return f"not ready (health {h if h is not None else 'not answering'}; {listed})"


def shell_exports(settings: Settings) -> str:
    """`export` lines that give a shell the same Airflow configuration as the services."""
    env = _env(settings)
    return "".join(
        f"export {k}={shlex.quote(v)}\n"
        for k, v in sorted(env.items())
        if k.startswith("AIRFLOW") or k in ("PATH", "PYSPARK_PYTHON", "JAVA_HOME")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pos_lambda_dev.runtime.airflow_service",
        description="The watcher `owned` starts beside an Airflow of its own: it waits until "
        "its stdin ends (the process that started that Airflow has ended, however), then "
        "stops the Airflow whose AIRFLOW_HOME is HOME and drops its registration LINK. "
        "Started by `owned`; `pos-infra airflow down` is the command for people.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    watch = sub.add_parser("watch", help="wait for the end of stdin, then stop HOME's Airflow")
    watch.add_argument("home", type=Path, help="the Airflow's AIRFLOW_HOME (its pid files)")
    watch.add_argument("link", type=Path, help="its registration under the state dir")
    args = parser.parse_args(argv)
    return _watch(args.home, args.link)


if __name__ == "__main__":
    sys.exit(main())
