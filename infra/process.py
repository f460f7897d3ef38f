"""Process plumbing shared by the local Kafka and Cassandra launchers.

Everything here is about one machine: pid files under the state directory, a port
check on 127.0.0.1, a free-disk check, awaiting a readiness condition, and the log
tail we show when a JVM dies during start-up.
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
from pathlib import Path


class ServiceError(RuntimeError):
    """A local service could not be started, stopped or reached; the message says why."""


@dataclass(frozen=True)
class ManagedProcess:
    """A daemon JVM we launched: its pid file and its console log."""

    name: str
    pid_file: Path
    log_file: Path

    @classmethod
    def in_state_dir(cls, name: str, root: Path) -> ManagedProcess:
        """The layout both services use: <root>/<name>.pid and <root>/logs/console.log."""
        return cls(name, root / f"{name}.pid", root / "logs" / "console.log")

    def pid(self) -> int | None:
        """The recorded pid if that process is still alive, else None (stale files are removed)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if alive(pid):
            return pid
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
        self.pid_file.write_text(str(proc.pid))
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


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie child of ours is reaped and is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    """A killed JVM's main thread turns zombie before its other threads have exited and
    released the process's sockets: only when no thread is left are its ports free."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; True if it held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


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
