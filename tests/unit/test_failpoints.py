"""Failpoints: armed from the faults settings, inert otherwise."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from pos_lambda.failpoints import NONE, Action, Armed, Failpoints
from pos_lambda.settings import load_settings


def test_nothing_is_armed_by_default() -> None:
    points = Failpoints.from_settings(load_settings().faults)
    assert points.armed == {}
    points.hit("speed.after_aggregates")  # returns: nothing armed
    NONE.hit("alerts.after_produce", 1)


def test_settings_arm_the_named_points() -> None:
    faults = load_settings(
        speed_crash_point="after_raw_rows",
        batch_crash_point="after_receipts",
        alerts_crash_point="stop_after_produce",
        alerts_crash_at_transaction=3,
        receipts_crash_point="kill_after_produce",
        receipts_crash_at_transaction=2,
    ).faults
    armed = Failpoints.from_settings(faults).armed
    assert armed == {
        "speed.after_raw_rows": Armed(Action.KILL),
        "batch.after_receipts": Armed(Action.KILL),
        "alerts.after_produce": Armed(Action.STOP, 3),
        "receipts.after_produce": Armed(Action.KILL, 2),
    }


def test_an_occurrence_bound_point_acts_only_then() -> None:
    points = Failpoints({"alerts.after_produce": Armed(Action.KILL, 3)})
    assert [points.is_armed("alerts.after_produce", n) for n in (1, 2, 3, 4)] == [
        False,
        False,
        True,
        False,
    ]
    assert not points.is_armed("speed.after_raw_rows")


def test_pause_returns_once_the_file_exists(tmp_path: Path) -> None:
    flag = tmp_path / "go"
    points = Failpoints.from_settings(load_settings(batch_pause_before_commit=flag).faults)
    timer = threading.Timer(0.3, flag.touch)
    timer.start()
    points.hit("batch.before_commit")
    assert flag.exists()
    timer.join()


def test_kill_is_a_sigkill_of_the_process() -> None:
    code = (
        "from pos_lambda.failpoints import *\n"
        "Failpoints({'speed.after_aggregates': Armed(Action.KILL)}).hit('speed.after_aggregates')\n"
        "print('survived')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL
    assert "survived" not in done.stdout
