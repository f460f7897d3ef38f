"""The chaos run's process manager and its alerts kills (faked processes): a processor
that exits before its crash point is started armed again, so every planned kill is made;
the held-back conflicting copies leave the stream, in its order, and nothing else."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda_dev.demo import chaos, chaos_context, figures
from pos_lambda_dev.demo.faults import alerts_kill


class Exited:
    """A started process as `watch` sees it: running (None) or its exit code."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = 1

    def poll(self) -> int | None:
        return self.returncode


def test_a_crash_point_not_reached_is_armed_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[tuple[Exited, dict[str, str]]] = []

    def start_logged(argv: list[str], env: dict[str, str], log: Path) -> Exited:
        started.append((Exited(), env))
        return started[-1][0]

    monkeypatch.setattr(chaos_context, "start_logged", start_logged)
    said: list[str] = []
    # No settings: watch and start_alerts read none (start_logged is faked), and the
    # committed offsets read at a kill fail quietly to None.
    run: Any = chaos_context.Chaos(None, None, argparse.Namespace(logs=tmp_path), said.append,
                           figures.Plan([]))  # fmt: skip
    monkeypatch.setattr(run, "alerts_committed", lambda: {0: 41})

    def crash_point() -> tuple[str | None, str | None]:
        env = started[-1][1]
        return env.get("POS_ALERTS_CRASH_POINT"), env.get("POS_ALERTS_CRASH_AT_TRANSACTION")

    run.start_alerts()
    assert crash_point() == (None, None)  # not armed: no kill planned yet
    run.alerts_armed = True
    run.start_alerts()
    assert crash_point() == ("kill_after_produce", "1")
    started[-1][0].returncode = 1  # Cassandra down: exited before its crash point
    run.watch()
    assert crash_point() == ("kill_after_produce", "1")  # the same kill, still to be made
    assert run.alerts_kills == []
    started[-1][0].returncode = -signal.SIGKILL  # its crash point struck
    run.watch()
    assert crash_point() == (None, None)  # the kill made: its successor runs unarmed
    assert [offsets for _, offsets in run.alerts_kills] == [{0: 41}]
    assert run.restarts == 2


def _message(kind: str, n: int, transaction: int) -> OutgoingMessage:
    value = (
        f'{{"operation_id": 1, "vendor_fiscal_module": 2, "transaction_id": {transaction}, '
        f'"n": {n}}}'
    ).encode()
    return OutgoingMessage(b"k", value, n, kind)


def test_the_first_conflicting_copies_are_held_back_until_their_originals_are_sent(
    tmp_path: Path,
) -> None:
    # (kind, receipt number): copies of receipts 10 and 11, then a later one of 12.
    sent = [("receipt", 10), ("resend", 10), ("receipt", 11), ("conflict", 10),
            ("receipt", 12), ("conflict", 11), ("conflict", 12)]  # fmt: skip
    messages = [_message(kind, n, t) for n, (kind, t) in enumerate(sent)]
    run: Any = chaos_context.Chaos(None, None, argparse.Namespace(logs=tmp_path), print,
                           figures.Plan([]))  # fmt: skip
    stream = alerts_kill.hold_back(run, messages, 2)
    assert [m.timestamp_ms for m in stream] == [0, 1, 2, 4, 6]  # the rest, in order
    # Copy of 10 after the stream's first message (10's original), of 11 after its third.
    assert [(m.timestamp_ms, after) for m, after in run.held] == [(3, 1), (5, 3)]
    assert alerts_kill.hold_back(run, messages, 0) == messages and run.held == []


def test_an_airflow_fault_runs_the_dag_over_the_hours_the_stream_has_passed(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    hour_ms = 3_600_000
    t0 = int(datetime(2026, 11, 18, tzinfo=UTC).timestamp() * 1000)
    # Sent every 20 minutes of simulated time: 12 messages span 4 hours.
    messages = [OutgoingMessage(b"k", b"v", t0 + i * hour_ms // 3, "receipt") for i in range(12)]
    run: Any = chaos_context.Chaos(None, None, argparse.Namespace(logs=tmp_path), print,
                           figures.Plan([]))  # fmt: skip
    run.interval = (datetime(2026, 11, 18, tzinfo=UTC), datetime(2026, 11, 18, 4, tzinfo=UTC))
    run.stream = chaos_context.Counting(messages)
    assert run.passed_hours() == run.interval  # nothing sent yet: the whole interval
    run.stream.sent = 2  # the last one sent at 00:20: not a whole hour passed
    assert run.passed_hours() == run.interval
    run.stream.sent = 8  # the last one sent at 02:20
    assert run.passed_hours() == (run.interval[0], datetime(2026, 11, 18, 2, tzinfo=UTC))
    run.stream.sent = 12  # the stream is over
    assert run.passed_hours() == run.interval


def test_the_receipts_processor_is_started_again_whenever_it_exits(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[tuple[Exited, list[str], dict[str, str]]] = []

    def start_logged(argv: list[str], env: dict[str, str], log: Path) -> Exited:
        started.append((Exited(), argv, env))
        return started[-1][0]

    monkeypatch.setattr(chaos_context, "start_logged", start_logged)
    said: list[str] = []
    run: Any = chaos_context.Chaos(None, None, argparse.Namespace(logs=tmp_path), said.append,
                           figures.Plan([]))  # fmt: skip
    run.start_receipts()
    first, argv, env = started[-1]
    assert argv == [str(chaos_context.VENV_BIN / "pos-receipts"), "run"]
    # Its own namespace, like the alerts'.
    assert env["POS_TOPIC_RECEIPTS"] == "chaos.receipts"
    assert env["POS_RECEIPTS_GROUP_ID"] == "chaos-receipts"
    assert env["POS_RECEIPTS_INSTANCE_ID"] == "chaos-1"
    run.watch()
    assert len(started) == 1 and run.restarts == 0  # running: left alone
    first.returncode = -signal.SIGKILL  # killed from outside
    run.watch()
    assert len(started) == 2 and run.receipts is started[-1][0] and run.restarts == 1
    assert said == ["watch: pos-receipts exited -9; starting it again"]
    assert run.procs == [first, started[-1][0]]  # both stopped at cleanup


@pytest.mark.parametrize(
    ("now", "past"),
    [
        ({0: 10, 1: 20}, False),  # where it was: not past
        ({0: 11, 1: 20}, True),  # one partition ahead, none behind
        ({0: 11, 1: 19}, False),  # one behind (a group reset): not past
        ({0: 10, 1: 20, 2: 1}, True),  # a partition it had not committed on
        ({}, False),
    ],
)
def test_a_group_is_past_the_offsets_at_a_kill_when_none_is_behind_and_one_ahead(
    now: dict[int, int], past: bool
) -> None:
    assert chaos_context.committed_past({0: 10, 1: 20}, now) is past


def _messages(n: int) -> list[OutgoingMessage]:
    return [OutgoingMessage(b"k", str(i).encode(), 0, "receipt") for i in range(n)]


def test_the_stream_waits_at_a_fault_point_until_the_fault_is_released() -> None:
    import threading

    stream = chaos_context.Counting(_messages(10), holds=(4, 7))
    taken: list[bytes] = []
    at_hold = threading.Event()

    def producer() -> None:
        for m in stream:
            taken.append(m.value)
            if len(taken) == 4:
                at_hold.set()

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    assert at_hold.wait(5)
    thread.join(0.3)  # held at 4: no fifth message
    assert thread.is_alive() and stream.sent == 4 and len(taken) == 4
    stream.release(4)
    stream.release(7)
    thread.join(5)
    assert not thread.is_alive()
    assert taken == [str(i).encode() for i in range(10)]
    assert stream.held_s > 0


def test_a_stopped_stream_ends_at_its_hold() -> None:
    stream = chaos_context.Counting(_messages(5), holds=(2,))
    stream.stop.set()
    assert list(stream) == []
    stream = chaos_context.Counting(_messages(5), holds=(2,))
    it = iter(stream)
    assert [next(it).value, next(it).value] == [b"0", b"1"]
    stream.stop.set()
    assert list(it) == []
    assert stream.sent == 2


class _Clock:
    """A monotonic clock that `time.sleep` moves (and records)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_the_stream_paces_itself_from_each_hold_on(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(100.0)
    monkeypatch.setattr(chaos_context.time, "sleep", clock.sleep)
    stream = chaos_context.Counting(_messages(6), rate=2.0, holds=(3,), clock=clock)
    stream.release(3)  # opened before the producer gets there: no wait
    assert len(list(stream)) == 6
    # 2 messages/s: slots at 0, 0.5, 1.0 s and so on, no catching up.
    assert clock.slept == [0.5, 0.5, 0.5, 0.5, 0.5]


def test_a_hold_starts_the_pace_again_instead_of_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock(0.0)
    monkeypatch.setattr(chaos_context.time, "sleep", clock.sleep)
    stream = chaos_context.Counting(_messages(4), rate=1.0, holds=(2,), clock=clock)

    def wait_a_minute(_timeout: float | None = None) -> bool:
        clock.now += 60.0
        stream._holds.discard(2)  # what release does, from the waiting thread's view
        return True

    monkeypatch.setattr(stream._open, "wait", wait_a_minute)
    assert len(list(stream)) == 4
    # The third message goes at once after the minute's hold, the fourth a second later:
    # no burst of the 60 messages the old schedule owed.
    assert clock.slept == [1.0, 1.0]
    assert stream.held_s == 60.0


def test_a_fault_point_is_a_count_of_messages_within_the_stream() -> None:
    assert chaos.fault_point(figures.Planned("speed_kill", 0.1234), 1000) == 124
    assert chaos.fault_point(figures.Planned("speed_kill", 0.5), 1000) == 500
    assert chaos.fault_point(figures.Planned("speed_kill", 1.0), 7) == 7
