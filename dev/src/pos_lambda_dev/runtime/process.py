"""Process plumbing shared by the local Kafka and Cassandra launchers.

Everything here is about one machine: pid files under the state directory, a port
check on 127.0.0.1, a free-disk check, awaiting a readiness condition, and the log
tail we show when a JVM dies during start-up.

A pid alone does not name a process: after a reboot (or enough forks) the pid in a pid
file belongs to someone else, and signalling it would kill an unrelated process. So a
pid file records the pid, the kernel's boot id and the process's start time (field 22
of /proc/<pid>/stat, clock ticks since boot), and a pid counts as ours only while all
three match. Pid files of the old format (the pid alone) cannot be checked that way:
the process's command line must then hold the service's marker (its main class), or
nothing is signalled and the error says what to do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pos_lambda.adapters.service import ServiceError as ServiceError
from pos_lambda.adapters.service import alive as alive
from pos_lambda.adapters.service import wait_for as wait_for


@dataclass(frozen=True)
class PidRecord:
    """What a pid file says. boot_id and start_time are None in an old (pid-only) file."""

    pid: int
    boot_id: str | None = None
    start_time: int | None = None


@dataclass(frozen=True)
class Observed:
    """What /proc says of the process that has the recorded pid now."""

    boot_id: str
    start_time: int
    cmdline: str  # arguments joined by spaces


class Verdict(Enum):
    OURS = "ours"
    STALE = "stale"  # not running, or the pid now belongs to another process
    UNVERIFIABLE = "unverifiable"  # an old pid file of a live pid, and no marker to check


def format_pid_file(record: PidRecord) -> str:
    """The pid first (`head -1` of the file is the pid, as before), then its identity."""
    fields = {"boot_id": record.boot_id, "start_time": record.start_time}
    return "".join([f"{record.pid}\n", *(f"{k}={v}\n" for k, v in fields.items() if v is not None)])


def parse_pid_file(text: str) -> PidRecord | None:
    """A pid file's record (old or new format), or None when it is not one."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip().isdigit():
        return None
    fields = dict(line.partition("=")[::2] for line in lines[1:])
    start = fields.get("start_time", "")
    return PidRecord(
        int(lines[0]),
        fields.get("boot_id") or None,
        int(start) if start.isdigit() else None,
    )


def judge(record: PidRecord, observed: Observed | None, marker: str | None) -> Verdict:
    """Whether the recorded process is the one running under its pid now (pure)."""
    if observed is None:
        return Verdict.STALE
    if record.boot_id is not None and record.start_time is not None:
        same = (record.boot_id, record.start_time) == (observed.boot_id, observed.start_time)
        return Verdict.OURS if same else Verdict.STALE
    if marker is None:
        return Verdict.UNVERIFIABLE
    return Verdict.OURS if marker in observed.cmdline else Verdict.STALE


def observe(pid: int) -> Observed | None:
    """The identity of live process `pid` from /proc, or None if it does not run."""
    return _identity(pid) if alive(pid) else None


def _identity(pid: int) -> Observed | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": split
    # after its last ")", where field 3 starts; field 22 is then the 20th.
    start_time = int(stat.rpartition(")")[2].split()[19])
    args = cmdline.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return Observed(boot_id(), start_time, args)


def boot_id() -> str:
    """This boot's id: start times count from boot, so they only compare within one."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@dataclass(frozen=True)
class ManagedProcess:
    """A daemon JVM we launched: its pid file and its console log.

    `marker` is a string the service's command line always holds (its main class): it
    identifies the process behind an old pid file that records no start time.
    """

    name: str
    pid_file: Path
    log_file: Path
    marker: str | None = None

    @classmethod
    def in_state_dir(cls, name: str, root: Path, marker: str | None = None) -> ManagedProcess:
        """The layout both services use: <root>/<name>.pid and <root>/logs/console.log."""
        return cls(name, root / f"{name}.pid", root / "logs" / "console.log", marker)

    def pid(self) -> int | None:
        """The recorded pid if that very process still runs, else None (a stale file is
        removed). Raises ServiceError for an old pid file that cannot be checked."""
        try:
            record = parse_pid_file(self.pid_file.read_text())
        except FileNotFoundError:
            return None
        if record is None:
            return None
        observed = observe(record.pid)
        verdict = judge(record, observed, self.marker)
        if verdict is Verdict.OURS:
            return record.pid
        if verdict is Verdict.UNVERIFIABLE:
            assert observed is not None
            raise ServiceError(
                f"{self.name}: {self.pid_file} is an old pid file (pid {record.pid}, no start "
                f"time) and pid {record.pid} runs `{observed.cmdline[:200]}`: cannot tell "
                "whether it is ours, so nothing is signalled. If it is the service, stop it "
                f"yourself (kill {record.pid}); either way delete {self.pid_file}."
            )
        self.pid_file.unlink(missing_ok=True)
        return None

    def launch(self, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            # A new session detaches the JVM from our terminal, so Ctrl-C in `make up`
            # or the end of a pytest run does not take the service down with it.
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        # Read while the child is ours and unreaped: even one that already exited is a
        # zombie whose /proc entry still holds its start time.
        observed = _identity(proc.pid)
        record = PidRecord(
            proc.pid, boot_id(), observed.start_time if observed is not None else None
        )
        self.pid_file.write_text(format_pid_file(record))
        return proc.pid

    def stop(self, timeout: float = 60.0) -> bool:
        """SIGTERM, await exit, then SIGKILL. Returns False if nothing was running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        if not wait_for(lambda: not alive(pid), timeout=timeout, interval=0.2):
            _signal_group(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), timeout=10, interval=0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self, timeout: float = 30.0) -> bool:
        """SIGKILL the process group and await its end (as `kill -9` would, for fault
        tests). Returns False if nothing was running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGKILL)
        if not wait_for(lambda: not alive(pid), timeout=timeout, interval=0.1):
            raise ServiceError(f"{self.name}: pid {pid} survived SIGKILL for {timeout} s")
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"(no log at {self.log_file})"
        return "\n".join(text[-lines:])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_free_ports(service: str, host: str, ports: Sequence[int]) -> None:
    taken = [p for p in ports if port_open(host, p)]
    if taken:
        raise ServiceError(
            f"{service}: port(s) {', '.join(map(str, taken))} on {host} are already in use "
            "by another process. Stop it, or choose other ports with the POS_*_PORT "
            "settings (see README, Configuration)."
        )


def require_free_disk(path: Path, min_bytes: int, service: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path).free
    if free < min_bytes:
        raise ServiceError(
            f"{service}: only {free // 2**20} MiB free under {path}; "
            f"at least {min_bytes // 2**20} MiB are needed. Free some space or set "
            "POS_STATE_DIR to a larger disk."
        )


def await_running(proc: ManagedProcess, ready: Callable[[], bool], timeout: float) -> bool:
    """If `proc` already runs, wait until it is ready and return True; False if it does not run."""
    if proc.pid() is None:
        return False
    if wait_for(ready, timeout=timeout, interval=1.0):
        return True
    raise ServiceError(f"{proc.name}: running but not ready; log tail:\n{proc.log_tail()}")


def launch_until_ready(
    proc: ManagedProcess,
    argv: Sequence[str],
    ready: Callable[[], bool],
    timeout: float,
    env: dict[str, str] | None = None,
) -> float:
    """Launch `argv` as `proc` and await `ready`; seconds taken. A death shows the log tail."""
    t0 = time.monotonic()
    pid = proc.launch(argv, env)

    def ready_or_dead() -> bool:
        if proc.pid() != pid:
            raise ServiceError(
                f"{proc.name}: process died during start-up; log tail:\n{proc.log_tail()}"
            )
        return ready()

    if not wait_for(ready_or_dead, timeout=timeout, interval=1.0):
        raise ServiceError(
            f"{proc.name}: not ready after {timeout:.0f}s; log tail:\n{proc.log_tail()}"
        )
    return time.monotonic() - t0
