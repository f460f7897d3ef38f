"""How `pos-speed run` runs its Spark drivers: which ones, supervised, restarted.

The supervisor (the `pos-speed run` process) starts each driver as a child process
(`python -m pos_lambda.speed_layer.cli run ... --jobs J --driver`) and starts it again
whenever it dies, within a restart budget (speed_layer/restart_policy.py); see
`supervise`. Pure choices (`drivers_for`, the restart policy) are unit-tested; the
processes are tested against the real services (tests/integration/test_speed_layer.py,
test_speed_restart.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings, SpeedSettings
from pos_lambda.speed_layer import SUPERVISOR_PID_ENV
from pos_lambda.speed_layer.metrics import DriverState
from pos_lambda.speed_layer.restart_policy import (
    GiveUp,
    RestartPolicy,
    decide,
    describe_exit,
    exit_status,
    in_window,
)

# The file descriptor on which a driver tells its supervisor it is ready (`report_ready`).
READY_FD_ENV = "POS_SPEED_READY_FD"
READY = b"ready\n"
# The setting a restarted driver gets turned off (`spawn`): POS_SPEED_WARM_UP.
WARM_UP_ENV = f"{SpeedSettings.model_config['env_prefix']}WARM_UP"
log = logging.getLogger("pos.speed")


@dataclass(frozen=True)
class Driver:
    """One Spark application of the speed layer: the jobs it runs, at what niceness."""

    jobs: tuple[str, ...]
    nice: int = 0


def drivers_for(
    settings: Settings, jobs: tuple[str, ...], available_now: bool = False
) -> list[Driver]:
    """Which drivers `pos-speed run` starts for `jobs` (pure: unit-tested).

    One per query in local mode (POS_SPEED_DRIVERS=auto): on two cores, Spark's fair
    pools share task slots, and an archiver task that holds a slot for seconds makes
    the views query's micro-batch wait for it; two processes share the cores through the
    operating system's scheduler instead, in slices of milliseconds, and a niced
    archiver yields them to the views query whenever both want them. Except for an
    `--available-now` run: it is measured by when both queries are done, not by how
    soon a receipt shows, and one driver's JVM loads and compiles Spark's code once
    where two would each do it (side by side, both queries one-shot on 252,711
    messages: 2,876 vs 2,719 events/s, 1.03-1.06 in three rounds; 3,011 vs 2,378 in the
    benchmark's two).
    """
    mode = settings.speed.drivers
    if mode == "auto":
        local = settings.spark.master.startswith("local")
        mode = "per-query" if local and not available_now else "shared"
    if mode == "shared" or len(jobs) == 1:
        return [Driver(jobs)]
    return [Driver((j,), settings.speed.archiver_nice if j == "archiver" else 0) for j in jobs]


def supervise(
    settings: Settings,
    drivers: list[Driver],
    argv: list[str],
    serve_metrics: bool = False,
    one_shot: bool = False,
) -> int:
    """Run each driver in a child process, started again whenever it dies (any exit but
    a finished `one_shot` run's 0, any signal) within the restart budget; a driver whose
    budget is spent stops the others, and the supervisor exits 1.

    SIGTERM or SIGINT stops every driver gracefully; then the supervisor exits 0 (or
    the exit status of a driver that did not stop cleanly).

    A fresh process, not a restarted query: after Cassandra comes back, the
    connector's cached session in the old JVM can block for good in a schema refresh.
    The new driver resumes from the checkpoints, and every sink write is an upsert of
    values recomputed from what is stored, so nothing is lost or counted twice.

    With `serve_metrics` (a continuous run), the supervisor serves the speed layer's
    metrics on POS_SPEED_METRICS_PORT (speed_layer/metrics.py): it outlives its drivers,
    so a driver that is down shows as such instead of as a scrape that fails.
    """
    stop = threading.Event()
    children: dict[int, subprocess.Popen[bytes]] = {}
    readiness = Readiness([", ".join(d.jobs) for d in drivers])
    restarts = [0 for _ in drivers]
    # Reentrant: a second signal can arrive while the handler of the first holds it.
    lock = threading.RLock()
    failed: list[int] = []  # exit codes of the drivers that stopped for good, first first

    def forward(signum: int, _: object = None) -> None:
        stop.set()
        with lock:
            running = [c for c in children.values() if c.poll() is None]
        for child in running:
            child.send_signal(signum)  # each driver stops its queries gracefully

    def spawn(index: int, driver: Driver) -> subprocess.Popen[bytes]:
        # coreutils' nice execs the driver at that niceness from its first instruction;
        # its JVM and Python workers inherit it.
        nice = ["nice", "-n", str(driver.nice)] if driver.nice else []
        restarting = index in children
        if adopting and restarting:  # nothing of the dead one may run on
            _end_leftovers(", ".join(SPEED_QUERY_OF_JOB[j] for j in driver.jobs), children, lock)
        # A restarted driver skips the warm-up: everything since the death waits for it,
        # and its first micro-batch, the replay, does the warm-up's work on real records;
        # warming up first would only keep the views stale 15-40 s longer.
        restart = {WARM_UP_ENV: "false"} if restarting else {}
        with lock:
            if stop.is_set():
                raise _Stopped
            ready_in, ready_out = os.pipe()
            try:
                child = subprocess.Popen(
                    [*nice, sys.executable, "-m", "pos_lambda.speed_layer.cli", *argv,
                     "--jobs", ",".join(driver.jobs), "--driver"],
                    env={**os.environ, SUPERVISOR_PID_ENV: str(os.getpid()),
                         READY_FD_ENV: str(ready_out), **restart},
                    pass_fds=(ready_out,),
                )  # fmt: skip
            except BaseException:
                os.close(ready_in)
                raise
            finally:
                os.close(ready_out)  # the child's copy is the only writer left
            if index in children:
                restarts[index] += 1
            readiness.unmark(index)
            children[index] = child
            threading.Thread(
                target=readiness.await_from, args=(index, ready_in), daemon=True
            ).start()
            return child

    def keep(index: int) -> None:
        try:
            code = keep_running(
                ", ".join(SPEED_QUERY_OF_JOB[j] for j in drivers[index].jobs),
                lambda: spawn(index, drivers[index]).wait(),
                stop,
                RestartPolicy.of(settings.speed),
                one_shot=one_shot,
                resume_hint=str(settings.checkpoint_dir),
            )
        except _Stopped:
            return
        if code != 0:
            with lock:
                failed.append(code)
            forward(signal.SIGTERM)  # one part of the speed layer is down: stop the rest

    def states() -> list[DriverState]:
        with lock:
            return [
                DriverState(
                    tuple(SPEED_QUERY_OF_JOB[j] for j in d.jobs),
                    up=i in children and children[i].poll() is None and readiness.is_ready(i),
                    restarts=restarts[i],
                )
                for i, d in enumerate(drivers)
            ]

    server = None
    if serve_metrics:
        from pos_lambda.adapters import metrics_http
        from pos_lambda.speed_layer.metrics import SpeedCollector

        server = metrics_http.serve(
            metrics_http.registry_of(SpeedCollector(settings, states)),
            settings.bind_host, settings.speed.metrics_port, "pos-speed",
        )  # fmt: skip
    adopting = _become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    threads = [threading.Thread(target=keep, args=(i,), daemon=True) for i in range(len(drivers))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(1)  # short waits: the main thread takes the signals
    if server is not None:
        server.shutdown()
    return failed[0] if failed else 0


# prctl(2): orphaned descendants are reparented to this process instead of init.
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    """Make what a killed driver leaves behind (its JVM, which outlives the Python process
    for a second or more and can still run the last micro-batch's tasks; Spark's Python
    workers) this process's children, so that `_end_leftovers` can end it (Linux)."""
    import ctypes

    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    except (OSError, AttributeError):
        return False


def _own_children() -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
                found |= {int(c) for c in f.read().split()}
    return found


def _end_leftovers(
    name: str, drivers: dict[int, subprocess.Popen[bytes]], lock: threading.RLock
) -> None:
    """SIGKILL and reap every child of the supervisor that is no driver: what a dead driver
    left behind, reparented here. Its JVM must not write to the checkpoint or the views
    while the restarted driver does; killing it is what `kill -9` of the whole driver
    would have done, and its unfinished micro-batch is replayed."""
    ended: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:  # a driver being started is in `drivers` before the lock is released
            left = _own_children() - {d.pid for d in drivers.values()}
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not left:
            break
        for pid in left:  # after SIGKILL they end at once; their own children come next
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        ended += sorted(left)
    if ended:
        log.info("%s: ended what its dead driver left behind (pids %s)", name, ended)


class Readiness:
    """Which drivers have said they are ready (warmed up, queries started); logs when
    all have, once: "speed layer ready in N s", the line operators and benchmarks await."""

    def __init__(self, drivers: list[str]) -> None:
        self.drivers = drivers
        self.started = time.monotonic()
        self.ready: set[int] = set()  # ever ready (to tell "ready again" apart)
        self.current: set[int] = set()  # ready since their last start
        self.lock = threading.Lock()

    def unmark(self, index: int) -> None:
        """The driver starts (again): not ready until it says so."""
        with self.lock:
            self.current.discard(index)

    def is_ready(self, index: int) -> bool:
        with self.lock:
            return index in self.current

    def await_from(self, index: int, pipe: int) -> None:
        """Read the driver's pipe until it says ready or closes (it exited first)."""
        with os.fdopen(pipe, "rb") as lines:
            if lines.readline() == READY:
                self.mark(index)

    def mark(self, index: int) -> None:
        with self.lock:
            again = index in self.ready
            self.ready.add(index)
            self.current.add(index)
            took = time.monotonic() - self.started
            if again:
                log.info("driver (%s) ready again after its restart", self.drivers[index])
            elif len(self.ready) == len(self.drivers):
                log.info("speed layer ready in %.1f s: %s running", took, "; ".join(self.drivers))


def report_ready() -> None:
    """In a driver: tell the supervisor this driver is ready (no supervisor: nothing)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        with contextlib.suppress(OSError):  # the supervisor is gone: nobody to tell
            os.write(int(fd), READY)
            os.close(int(fd))


class _Stopped(Exception):
    """The speed layer is stopping: start no driver."""


def keep_running(
    name: str,
    run: Callable[[], int],
    stop: threading.Event,
    policy: RestartPolicy,
    one_shot: bool = False,
    resume_hint: str = "",
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[float], bool] | None = None,
) -> int:
    """One driver (`run` starts it and returns its `Popen.returncode`), started again
    after each death as `policy` decides. Returns its exit status once the speed layer
    stops (`stop`), a `one_shot` run finished (0), or 1 once the budget is spent.

    `wait(seconds)` returns True if the speed layer is stopping (default: `stop.wait`).
    """
    wait = wait or stop.wait
    deaths: list[float] = []
    while True:
        code = run()
        if stop.is_set() or (one_shot and code == 0):
            return exit_status(code)
        deaths = in_window(policy, [*deaths, clock()])
        how = describe_exit(code)
        decision = decide(policy, deaths)
        if isinstance(decision, GiveUp):
            log.error(
                "%s: driver %s, its death %d within %.0f s: restart budget spent "
                "(POS_SPEED_MAX_RESTARTS=%d within POS_SPEED_RESTART_WINDOW_SECONDS=%.0f). "
                "Stopping the speed layer; fix the cause (see above) and start `pos-speed "
                "run` again, or let a process manager do it: it resumes from its "
                "checkpoints under %s.",
                name, how, decision.deaths, policy.window_s, policy.max_restarts,
                policy.window_s, resume_hint,
            )  # fmt: skip
            return 1
        log.warning(
            "%s: driver %s; restarting from its checkpoint in %.0f s "
            "(restart %d of %d within %.0f s)",
            name, how, decision.delay_s, decision.nth, policy.max_restarts, policy.window_s,
        )  # fmt: skip
        # A retry delay (giving Cassandra or Kafka time to come back), not synchronisation.
        if decision.delay_s > 0 and wait(decision.delay_s):
            return 0


def die_with_supervisor() -> None:
    """A driver dies with its supervisor (Linux), even by `kill -9`: no orphan driver
    keeps a query's checkpoint while a restarted speed layer runs the same query."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    supervisor = os.environ.get(SUPERVISOR_PID_ENV)
    if supervisor and os.getppid() != int(supervisor):  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)
