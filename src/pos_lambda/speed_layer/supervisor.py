"""How `pos-speed run` runs its Spark drivers: which ones, supervised, restarted.

The supervisor (the `pos-speed run` process) starts each driver as a child process
(`python -m pos_lambda.speed_layer.cli run ... --jobs J --driver`) and starts it again
whenever it dies, within a restart budget (speed_layer/restart_policy.py); with
POS_SPEED_STANDBY it keeps a standby beside each driver, which takes over when the
driver dies (see `supervise`, and `hear_word` for what the two processes say to each
other). Pure choices (`drivers_for`, the restart policy, what to do on each event:
speed_layer/supervision.py) are unit-tested; the processes are tested with stand-in
drivers (tests/unit/speed_layer/test_supervisor_standby.py) and against the real
services (tests/integration/test_speed_layer.py, test_speed_restart.py,
test_speed_standby.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings, SpeedSettings
from pos_lambda.speed_layer import SUPERVISOR_PID_ENV
from pos_lambda.speed_layer.metrics import DriverState
from pos_lambda.speed_layer.restart_policy import RestartPolicy
from pos_lambda.speed_layer.supervision import (
    Action,
    Begin,
    DriverDied,
    DriverReady,
    EndLeftovers,
    EndStandby,
    Event,
    Finish,
    Phase,
    Say,
    Slot,
    StandbyDied,
    StandingBy,
    StartDriver,
    StartStandby,
    Stop,
    SupervisionRules,
    TakeOver,
    TakeoverFailed,
    Tick,
    step,
    wake_at,
)

# The file descriptor on which a driver tells its supervisor it is ready (`report_ready`)
# and a standby that it stands by (`report_standing_by`).
READY_FD_ENV = "POS_SPEED_READY_FD"
READY = b"ready\n"
STANDING_BY = b"standing by\n"
# The file descriptor on which a standby hears the supervisor's word (`hear_word`).
GO_FD_ENV = "POS_SPEED_GO_FD"
GO = b"go\n"
# A standby that took over names itself so (/proc/PID/comm, `ps -e`); its command line
# still says --standby.
TOOK_OVER_NAME = "pos-driver"
# The setting a restarted driver gets turned off (`_Slot._spawn`): POS_SPEED_WARM_UP.
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
    command: list[str] | None = None,
) -> int:
    """Run each driver in a child process, started again whenever it dies (any exit but
    a finished `one_shot` run's 0, any signal) within the restart budget; a driver whose
    budget is spent stops the others, and the supervisor exits 1.

    SIGTERM or SIGINT stops every driver (and standby) gracefully; then the supervisor
    exits 0 (or the exit status of a driver that did not stop cleanly).

    A fresh process, not a restarted query: after Cassandra comes back, the
    connector's cached session in the old JVM can block for good in a schema refresh.
    The new driver resumes from the checkpoints, and every sink write is an upsert of
    values recomputed from what is stored, so nothing is lost or counted twice.

    With POS_SPEED_STANDBY (never `one_shot`), a standby process waits beside each
    driver and takes over when it dies (speed_layer/supervision.py decides, `_Slot`
    carries it out; the protocol is at `hear_word`).

    With `serve_metrics` (a continuous run), the supervisor serves the speed layer's
    metrics on POS_SPEED_METRICS_PORT (speed_layer/metrics.py): it outlives its drivers,
    so a driver that is down shows as such instead of as a scrape that fails.

    `command` runs a driver (the speed layer's CLI; a test's stand-in).
    """
    shared = _Shared(
        argv=argv,
        command=command or [sys.executable, "-m", "pos_lambda.speed_layer.cli"],
        stop=threading.Event(),
        # Reentrant: a second signal can arrive while the handler of the first holds it.
        lock=threading.RLock(),
        processes={},
        readiness=Readiness([", ".join(d.jobs) for d in drivers]),
    )
    slots = [
        _Slot(
            index,
            driver,
            SupervisionRules(
                ", ".join(SPEED_QUERY_OF_JOB[j] for j in driver.jobs),
                RestartPolicy.of(settings.speed),
                standby=settings.speed.standby and not one_shot,
                one_shot=one_shot,
                resume_hint=str(settings.checkpoint_dir),
                standby_after_ready_s=settings.speed.standby_after_ready_seconds,
            ),
            shared,
        )
        for index, driver in enumerate(drivers)
    ]
    failed: list[int] = []  # exit codes of the drivers that stopped for good, first first

    def forward(signum: int, _: object = None) -> None:
        shared.stop.set()
        with shared.lock:
            running = [p for p in shared.processes.values() if p.poll() is None]
        for process in running:
            process.send_signal(signum)  # each driver stops its queries gracefully
        for slot in slots:
            slot.inbox.put(_Report("stop"))

    def keep(slot: _Slot) -> None:
        code = slot.run()
        if code != 0:
            with shared.lock:
                failed.append(code)
            forward(signal.SIGTERM)  # one part of the speed layer is down: stop the rest

    def states() -> list[DriverState]:
        return [
            DriverState(
                tuple(SPEED_QUERY_OF_JOB[j] for j in s.driver.jobs),
                up=s.state.driver is Phase.UP,
                restarts=s.state.restarts,
                standby_up=s.state.standby is Phase.UP,
            )
            for s in slots
        ]

    server = None
    if serve_metrics:
        from pos_lambda.adapters import metrics_http
        from pos_lambda.speed_layer.metrics import SpeedCollector

        server = metrics_http.serve(
            metrics_http.registry_of(SpeedCollector(settings, states)),
            settings.bind_host, settings.speed.metrics_port, "pos-speed",
        )  # fmt: skip
    shared.adopting = _become_subreaper()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    threads = [threading.Thread(target=keep, args=(s,), daemon=True) for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(1)  # short waits: the main thread takes the signals
    if server is not None:
        server.shutdown()
    return failed[0] if failed else 0


@dataclass
class _Shared:
    """What the supervisor's threads share."""

    argv: list[str]
    command: list[str]
    stop: threading.Event
    lock: threading.RLock
    processes: dict[int, subprocess.Popen[bytes]]  # every driver and standby, by pid
    readiness: Readiness
    adopting: bool = False  # what a dead driver leaves behind becomes ours to end


@dataclass(frozen=True)
class _Report:
    """What a process did (or "stop"), from the threads that watch it."""

    what: str  # "died", "ready", "standing by", "stop"
    process: subprocess.Popen[bytes] | None = None
    code: int = 0


class _Slot:
    """One driver's processes, its driver and its standby, run as `supervision.step`
    decides. Its thread (`run`) is the only one that changes them; the threads that
    watch the processes report to its inbox."""

    def __init__(
        self, index: int, driver: Driver, rules: SupervisionRules, shared: _Shared
    ) -> None:
        self.index = index
        self.driver = driver
        self.rules = rules
        self.shared = shared
        self.inbox: queue.Queue[_Report] = queue.Queue()
        self.state = Slot()  # read by the metrics' thread: replaced, never changed
        self.active: subprocess.Popen[bytes] | None = None
        self.standby: subprocess.Popen[bytes] | None = None
        self.word: int | None = None  # our end of the standby's word pipe
        self.finished: int | None = None

    def run(self) -> int:
        """Until the slot is finished; returns its exit status."""
        self._handle(Begin(time.monotonic()))
        while self.finished is None:
            wake = wake_at(self.rules, self.state)
            try:
                report = self.inbox.get(
                    timeout=None if wake is None else max(0.0, wake - time.monotonic())
                )
            except queue.Empty:
                report = None
            now = time.monotonic()
            if self.shared.stop.is_set() and not self.state.stopping:
                self._handle(Stop(now))
            event = Tick(now) if report is None else self._event(report, now)
            if event is not None and self.finished is None:
                self._handle(event)
        return self.finished

    def _event(self, report: _Report, now: float) -> Event | None:
        """The event a process's report means, or None if it no longer matters."""
        process = report.process
        if report.what == "died" and process is not None:
            with self.shared.lock:
                self.shared.processes.pop(process.pid, None)
            if process is self.active:
                self.active = None
                return DriverDied(now, report.code)
            if process is self.standby:
                self.standby = None
                self._close_word()
                return StandbyDied(now, report.code)
            return None  # a standby that was gone before its takeover: TakeoverFailed
        if report.what == "ready" and process is not None and process is self.active:
            self.shared.readiness.mark(self.index)
            return DriverReady(now)
        if report.what == "standing by" and process is not None and process is self.standby:
            log.info("%s: standby driver (pid %d) standing by", self.rules.name, process.pid)
            return StandingBy(now)
        return None

    def _handle(self, event: Event) -> None:
        events = [event]
        while events:
            self.state, actions = step(self.rules, self.state, events.pop(0))
            for action in actions:
                events += self._do(action)

    def _do(self, action: Action) -> list[Event]:
        """Carry `action` out; the events that follow at once (a process that could not
        start because the speed layer stops)."""
        now = time.monotonic()
        match action:
            case Say(level=level, text=text):
                log.log(level, "%s", text)
            case EndLeftovers(whose=whose):
                if self.shared.adopting:  # nothing of the dead one may run on
                    _end_leftovers(self.rules.name, self.shared.processes, self.shared.lock, whose)
            case StartDriver(warm_up=warm_up):
                self.active = self._spawn(standby=False, warm_up=warm_up)
                if self.active is None:
                    return [Stop(now), DriverDied(now, 0)]
                self.shared.readiness.unmark(self.index)
            case TakeOver():
                return self._take_over(now)
            case StartStandby():
                self.standby = self._spawn(standby=True, warm_up=True)
                if self.standby is None:
                    return [Stop(now), StandbyDied(now, 0)]
            case EndStandby():
                if self.standby is not None:
                    self.standby.terminate()  # it stops its session and leaves
            case Finish(code=code):
                self.finished = code
        return []

    def _take_over(self, now: float) -> list[Event]:
        standby, word = self.standby, self.word
        self.standby = self.word = None
        if standby is None or word is None:  # the machine says TakeOver only with one
            return [TakeoverFailed(now)]
        try:
            os.write(word, GO)
        except OSError:  # EPIPE: nobody reads it, the standby has exited
            return [TakeoverFailed(now)]
        finally:
            os.close(word)
        self.active = standby
        self.shared.readiness.unmark(self.index)
        log.info(
            "%s: standby driver (pid %d) takes over: it starts the query from its checkpoint",
            self.rules.name, standby.pid,
        )  # fmt: skip
        return []

    def _close_word(self) -> None:
        if self.word is not None:
            os.close(self.word)
            self.word = None

    def _spawn(self, standby: bool, warm_up: bool) -> subprocess.Popen[bytes] | None:
        """Start a driver process (a standby: `--standby`, with the word pipe), watched
        by two threads of its own; None if the speed layer is stopping."""
        shared = self.shared
        # coreutils' nice execs the driver at that niceness from its first instruction;
        # its JVM and Python workers inherit it. A standby runs at its driver's niceness:
        # it cannot raise its priority once it takes over.
        nice = ["nice", "-n", str(self.driver.nice)] if self.driver.nice else []
        # A restarted driver skips the warm-up: everything since the death waits for it,
        # and its first micro-batch, the replay, does the warm-up's work on real records;
        # warming up first would only keep the views stale 15-40 s longer.
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
        if not warm_up:
            env[WARM_UP_ENV] = "false"
        with shared.lock:
            if shared.stop.is_set():
                return None
            ready_in, ready_out = os.pipe()
            word_in, word_out = os.pipe() if standby else (-1, -1)
            env[READY_FD_ENV] = str(ready_out)
            if standby:
                env[GO_FD_ENV] = str(word_in)
            theirs = (ready_out, word_in) if standby else (ready_out,)
            try:
                child = subprocess.Popen(
                    [*nice, *shared.command, *shared.argv, "--jobs", ",".join(self.driver.jobs),
                     "--driver", *(["--standby"] if standby else [])],
                    env=env,
                    pass_fds=theirs,
                )  # fmt: skip
            except BaseException:
                os.close(ready_in)
                if standby:
                    os.close(word_out)
                raise
            finally:
                for fd in theirs:
                    os.close(fd)  # the child's copies are the only ones left
            # Registered before the lock is released: `_end_leftovers` spares it.
            shared.processes[child.pid] = child
        if standby:
            self.word = word_out
            log.info("%s: started a standby driver (pid %d)", self.rules.name, child.pid)
        threading.Thread(target=self._await_exit, args=(child,), daemon=True).start()
        threading.Thread(target=self._listen, args=(child, ready_in), daemon=True).start()
        return child

    def _await_exit(self, child: subprocess.Popen[bytes]) -> None:
        self.inbox.put(_Report("died", child, child.wait()))

    def _listen(self, child: subprocess.Popen[bytes], pipe: int) -> None:
        """Read what the process says on its ready pipe until it closes (it exits)."""
        with os.fdopen(pipe, "rb") as lines:
            for line in lines:
                if line == READY:
                    self.inbox.put(_Report("ready", child))
                elif line == STANDING_BY:
                    self.inbox.put(_Report("standing by", child))


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
    name: str,
    drivers: Mapping[Any, subprocess.Popen[bytes]],
    lock: threading.RLock,
    whose: str = "driver",
) -> None:
    """SIGKILL and reap every child of the supervisor that is no driver (nor standby):
    what a dead driver left behind, reparented here. Its JVM must not write to the
    checkpoint or the views while the restarted driver does; killing it is what `kill -9`
    of the whole driver would have done, and its unfinished micro-batch is replayed."""
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
        log.info("%s: ended what its dead %s left behind (pids %s)", name, whose, ended)


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


# What a driver and a standby say (the driver's side of the protocol). A driver says
# `ready` once its queries started (`report_ready`). A standby (`--standby`) says
# `standing by` once its session is up and warmed up (`report_standing_by`), then waits
# for the supervisor's word on the pipe named by POS_SPEED_GO_FD (`hear_word`): `go`
# (its driver died and whatever it left is ended), and it starts its queries from their
# checkpoints and says `ready` as any driver; the pipe closed without a word (the
# supervisor gone), or SIGTERM, and it leaves without having started anything.


def report_ready() -> None:
    """In a driver: tell the supervisor this driver is ready (no supervisor: nothing)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        with contextlib.suppress(OSError):  # the supervisor is gone: nobody to tell
            os.write(int(fd), READY)
            os.close(int(fd))


def report_standing_by() -> None:
    """In a standby: tell the supervisor it stands by (the pipe stays open for `ready`)."""
    fd = os.environ.get(READY_FD_ENV)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(int(fd), STANDING_BY)


class Word:
    """The supervisor's word to a standby, heard by a thread of its own: the main thread
    stays free for the warm-up (which asks `heard` between passes) and for signals."""

    def __init__(self, fd: int) -> None:
        self.heard = threading.Event()
        self.go = False  # told to go; heard without it: told to stand down
        threading.Thread(target=self._listen, args=(fd,), daemon=True).start()

    def _listen(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            self.go = pipe.readline() == GO
        self.heard.set()


def hear_word() -> Word:
    """In a standby: start listening for the supervisor's word."""
    fd = os.environ.pop(GO_FD_ENV, None)
    if fd is None:
        raise RuntimeError(
            f"a standby driver waits for its supervisor's word on {GO_FD_ENV}, which is not "
            "set: only `pos-speed run` starts standbys (POS_SPEED_STANDBY)"
        )
    os.set_inheritable(int(fd), False)  # the JVM must not keep the pipe open
    return Word(int(fd))


def name_this_process(name: str) -> None:
    """Set this process's name as `ps -e` and /proc/PID/comm show it (Linux; call it from
    the main thread: the name is per thread, and the main thread's is the process's)."""
    import ctypes

    pr_set_name = 15
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_name, name.encode()[:15])


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
