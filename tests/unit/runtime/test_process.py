"""Process plumbing: clear failures (port taken, no disk, dead process) and clean stops."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import cassandra_service, kafka_service
from pos_lambda_dev.runtime.process import (
    ManagedProcess,
    Observed,
    PidRecord,
    ServiceError,
    Verdict,
    format_pid_file,
    judge,
    parse_pid_file,
    require_free_disk,
    wait_for,
)


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


# --- identifying our own processes before signalling ----------------------------------

BOOT = "3d1b3879-85a6-46dc-a4a7-d8b538cc5512"


def test_pid_file_format_and_the_old_one() -> None:
    record = PidRecord(4242, BOOT, 987654)
    assert format_pid_file(record) == f"4242\nboot_id={BOOT}\nstart_time=987654\n"
    assert parse_pid_file(f"4242\nboot_id={BOOT}\nstart_time=987654\n") == record
    assert parse_pid_file("4242") == PidRecord(4242, None, None)  # the old format
    assert parse_pid_file("4242\n") == PidRecord(4242, None, None)
    assert parse_pid_file("") is None
    assert parse_pid_file("not a pid\n") is None
    assert parse_pid_file("-1\n") is None


@pytest.mark.parametrize(
    ("record", "observed", "marker", "verdict"),
    [
        (PidRecord(7, BOOT, 100), None, None, Verdict.STALE),
        (PidRecord(7, BOOT, 100), Observed(BOOT, 100, "java kafka.Kafka"), None, Verdict.OURS),
        # the pid now belongs to a process started later (or at the same tick of another boot)
        (PidRecord(7, BOOT, 100), Observed(BOOT, 101, "java kafka.Kafka"), None, Verdict.STALE),
        (PidRecord(7, "other-boot", 100), Observed(BOOT, 100, "bash"), None, Verdict.STALE),
        # old pid files: only the command line can tell
        (PidRecord(7), None, "kafka.Kafka", Verdict.STALE),
        (PidRecord(7), Observed(BOOT, 5, "java -cp x kafka.Kafka k.properties"), "kafka.Kafka",
         Verdict.OURS),
        (PidRecord(7), Observed(BOOT, 5, "/usr/bin/vim notes"), "kafka.Kafka", Verdict.STALE),
        (PidRecord(7), Observed(BOOT, 5, "/usr/bin/vim notes"), None, Verdict.UNVERIFIABLE),
    ],
)  # fmt: skip
def test_judge(
    record: PidRecord, observed: Observed | None, marker: str | None, verdict: Verdict
) -> None:
    assert judge(record, observed, marker) is verdict


def _start_ticks(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat, read here independently of pos_lambda_dev.runtime.process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[22 - 3])


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.fixture
def unrelated() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that ManagedProcess did not launch (its own session, like a service)."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def test_launch_records_pid_boot_and_start_time(tmp_path: Path) -> None:
    proc = ManagedProcess.in_state_dir("sleeper", tmp_path)
    pid = proc.launch(["sleep", "60"])
    try:
        assert proc.pid_file.read_text() == (
            f"{pid}\nboot_id={_boot_id()}\nstart_time={_start_ticks(pid)}\n"
        )
        assert proc.pid() == pid
    finally:
        assert proc.stop(timeout=10) is True


def test_a_pid_file_naming_another_process_signals_nothing(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    # The pid is live, but its start time is not the recorded one: a reused pid. The
    # marker matches the command line, and must not matter when a start time is recorded.
    proc = ManagedProcess("kafka", tmp_path / "kafka.pid", tmp_path / "k.log", "sleep")
    wrong = PidRecord(unrelated.pid, _boot_id(), _start_ticks(unrelated.pid) - 1)
    proc.pid_file.write_text(format_pid_file(wrong))
    assert proc.stop(timeout=5) is False
    assert not proc.pid_file.exists()  # stale: removed
    proc.pid_file.write_text(format_pid_file(wrong))
    assert proc.kill(timeout=5) is False
    assert not proc.pid_file.exists()
    # stop() and kill() await the death of what they signal: it still runs, so no signal.
    assert unrelated.poll() is None


def test_the_same_pid_file_with_the_right_start_time_is_ours(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    # The control of the test above: the identity check is what made the difference.
    proc = ManagedProcess("kafka", tmp_path / "kafka.pid", tmp_path / "k.log")
    right = PidRecord(unrelated.pid, _boot_id(), _start_ticks(unrelated.pid))
    proc.pid_file.write_text(format_pid_file(right))
    assert proc.pid() == unrelated.pid
    assert proc.stop(timeout=10) is True
    assert unrelated.poll() is not None


def test_a_pid_file_naming_this_very_process_with_another_start_time_is_stale(
    tmp_path: Path,
) -> None:
    proc = ManagedProcess("kafka", tmp_path / "kafka.pid", tmp_path / "k.log")
    me = os.getpid()
    proc.pid_file.write_text(format_pid_file(PidRecord(me, _boot_id(), _start_ticks(me) + 1)))
    assert proc.pid() is None
    assert not proc.pid_file.exists()


def test_an_old_pid_file_is_ours_only_when_the_command_line_holds_the_marker(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    pid_file = tmp_path / "kafka.pid"
    pid_file.write_text(str(unrelated.pid))  # the old format: the pid alone
    kafka = ManagedProcess("kafka", pid_file, tmp_path / "k.log", marker="kafka.Kafka")
    assert kafka.stop(timeout=5) is False
    assert not pid_file.exists()
    assert unrelated.poll() is None

    pid_file.write_text(str(unrelated.pid))
    sleeper = ManagedProcess("sleeper", pid_file, tmp_path / "s.log", marker="sleep")
    assert sleeper.pid() == unrelated.pid
    assert sleeper.stop(timeout=10) is True
    assert unrelated.poll() is not None


def test_an_old_pid_file_without_a_marker_is_refused(
    tmp_path: Path, unrelated: subprocess.Popen[bytes]
) -> None:
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(f"{unrelated.pid}\n")
    proc = ManagedProcess("x", pid_file, tmp_path / "x.log")
    with pytest.raises(
        ServiceError, match=f"old pid file .*nothing is signalled.*kill {unrelated.pid}"
    ):
        proc.stop(timeout=5)
    assert pid_file.exists()  # the operator decides
    assert unrelated.poll() is None


def test_an_old_pid_file_of_a_dead_process_is_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(str(gone.pid))
    assert ManagedProcess("x", pid_file, tmp_path / "x.log").pid() is None
    assert not pid_file.exists()
