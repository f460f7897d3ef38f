"""Process plumbing: clear failures (port taken, no disk, dead process) and clean stops."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import cassandra_service, kafka_service
from infra.process import ManagedProcess, ServiceError, require_free_disk, wait_for
from infra.settings import Settings


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_kafka_start_refuses_a_taken_port(tmp_path: Path, listening_port: int) -> None:
    s = Settings(state_dir=tmp_path, kafka_port=listening_port)
    with pytest.raises(ServiceError, match="already in use") as err:
        kafka_service.start(s)
    assert str(listening_port) in str(err.value)


def test_cassandra_start_refuses_a_taken_port(tmp_path: Path, listening_port: int) -> None:
    s = Settings(state_dir=tmp_path, cassandra_port=listening_port)
    with pytest.raises(ServiceError, match="POS_\\*_PORT"):
        cassandra_service.start(s)


def test_not_enough_disk_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="POS_STATE_DIR"):
        require_free_disk(tmp_path, 2**62, "kafka")


def test_a_dead_process_is_reported_with_its_log_tail(tmp_path: Path) -> None:
    proc = ManagedProcess("demo", tmp_path / "demo.pid", tmp_path / "logs" / "demo.log")
    pid = proc.launch(["sh", "-c", "echo first line; echo fatal: boom; exit 3"])
    assert wait_for(lambda: proc.pid() is None, timeout=10, interval=0.05)
    assert not (tmp_path / "demo.pid").exists()
    assert proc.log_tail(1) == "fatal: boom"
    assert pid > 0


def test_stop_terminates_the_process_group(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", tmp_path / "s.pid", tmp_path / "s.log")
    pid = proc.launch(["sh", "-c", "sleep 300 & wait"])
    assert proc.pid() == pid
    assert proc.stop(timeout=10) is True
    assert proc.pid() is None
    assert proc.stop() is False  # stopping twice is harmless


def test_kill_ends_a_child_of_ours_even_before_it_is_reaped(tmp_path: Path) -> None:
    # A service started by this very process (as the test fixtures do) stays a zombie
    # after SIGKILL until reaped: kill() must not take the zombie for a live process.
    proc = ManagedProcess.in_state_dir("sleeper", tmp_path)
    pid = proc.launch(["sleep", "60"])
    assert proc.pid() == pid
    assert proc.kill(timeout=10) is True
    assert proc.pid() is None
    assert proc.kill() is False
