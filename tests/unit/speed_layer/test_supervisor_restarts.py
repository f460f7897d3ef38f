"""The supervisor's restart policy (pure): deaths at literal times -> restart delays or
giving up (the supervisor's steps that apply it: test_supervision.py); and the end of
what a dead driver left behind, in real processes."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from pos_lambda.settings import load_settings
from pos_lambda.speed_layer.restart_policy import (
    GiveUp,
    Restart,
    RestartPolicy,
    decide,
    describe_exit,
    exit_status,
    in_window,
)

# 3 restarts within 60 s; 2 s, 4 s, ... up to 5 s between.
POLICY = RestartPolicy(max_restarts=3, window_s=60, backoff_s=2, backoff_max_s=5)


def schedule(policy: RestartPolicy, deaths: list[float]) -> list[Restart | GiveUp]:
    """The decision after each death, as the supervisor meets them one by one."""
    return [decide(policy, deaths[: i + 1]) for i in range(len(deaths))]


def test_the_first_restart_is_immediate_then_the_backoff_doubles_and_the_budget_runs_out() -> None:
    assert schedule(POLICY, [0, 10, 20, 30]) == [
        Restart(0, 1),
        Restart(2, 2),
        Restart(4, 3),
        GiveUp(4),
    ]


def test_the_backoff_is_capped() -> None:
    many = RestartPolicy(max_restarts=6, window_s=600, backoff_s=2, backoff_max_s=5)
    assert [d.delay_s for d in schedule(many, [0, 1, 2, 3, 4, 5]) if isinstance(d, Restart)] == [
        0,
        2,
        4,
        5,
        5,
        5,
    ]


def test_the_window_slides_deaths_older_than_it_no_longer_count() -> None:
    # At 70 s the window is (10, 70]: the deaths at 0 and 10 have left it.
    assert schedule(POLICY, [0, 10, 20, 70]) == [
        Restart(0, 1),
        Restart(2, 2),
        Restart(4, 3),
        Restart(2, 2),
    ]
    assert in_window(POLICY, [0, 10, 20, 70]) == [20, 70]


def test_a_driver_that_dies_once_an_hour_is_always_restarted_at_once() -> None:
    assert schedule(POLICY, [0, 3600, 7200, 10800, 14400]) == [Restart(0, 1)] * 5


def test_a_crash_loop_gives_up_within_the_window_whatever_the_pace() -> None:
    # Four deaths 19 s apart all fall within 60 s: the fourth spends the budget.
    assert schedule(POLICY, [100, 119, 138, 157])[-1] == GiveUp(4)


def test_no_restarts_allowed_gives_up_at_the_first_death() -> None:
    assert decide(RestartPolicy(0, 60, 2, 30), [5]) == GiveUp(1)


def test_the_shipped_policy_restarts_five_times_in_ten_minutes() -> None:
    shipped = RestartPolicy.of(load_settings().speed)
    assert shipped == RestartPolicy(max_restarts=5, window_s=600, backoff_s=2, backoff_max_s=30)
    assert schedule(shipped, [0, 40, 80, 120, 160, 200]) == [
        Restart(0, 1),
        Restart(2, 2),
        Restart(4, 3),
        Restart(8, 4),
        Restart(16, 5),
        GiveUp(6),
    ]


@pytest.mark.parametrize(
    ("code", "said", "status"),
    [
        (-signal.SIGKILL, "killed by SIGKILL", 137),
        (-signal.SIGSEGV, "killed by SIGSEGV", 139),
        (75, "exited 75 (a query failed; its cause is logged above)", 75),
        (0, "exited 0 while the speed layer was running", 0),
        (1, "exited 1", 1),
    ],
)
def test_how_a_driver_ended_is_said_and_its_shell_status(code: int, said: str, status: int) -> None:
    assert describe_exit(code) == said
    assert exit_status(code) == status


LEFTOVER = """
import logging, os, subprocess, threading
from pos_lambda.speed_layer import supervisor

logging.basicConfig(level=logging.INFO)

assert supervisor._become_subreaper()
# A "driver" that dies and leaves a process behind, as a SIGKILLed driver leaves its JVM.
driver = subprocess.run(
    ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
)
orphan = int(driver.stdout)
assert orphan in supervisor._own_children()  # reparented to the supervisor
running = subprocess.Popen(["sleep", "300"])  # the other driver: left alone
supervisor._end_leftovers("pos-speed-views", {1: running}, threading.RLock())
gone = not os.path.exists(f"/proc/{orphan}")
alive = running.poll() is None
running.kill()
print(gone, alive)
"""


def test_what_a_dead_driver_left_behind_is_ended_before_its_restart_the_other_driver_not() -> None:
    # In a process of its own: becoming a subreaper would adopt pytest's orphans too.
    done = subprocess.run(
        [sys.executable, "-c", LEFTOVER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    assert "pos-speed-views: ended what its dead driver left behind (pids [" in done.stderr
