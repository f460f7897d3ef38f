"""The supervisor's restart policy (pure): deaths at literal times -> restart delays or
giving up; and the loop that applies it to one driver, with a fake process and clock."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

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
from pos_lambda.speed_layer.supervisor import keep_running

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


class FakeDriver:
    """Each `run` is one life of the driver: it ends with the next code, at the next time
    of a fake clock; `wait` records the delays instead of sleeping."""

    def __init__(
        self,
        lives: list[tuple[float, int]],
        stop_at_run: int | None = None,
        stop_in_wait: bool = False,
    ) -> None:
        self.lives: Iterator[tuple[float, int]] = iter(lives)
        self.now = 0.0
        self.runs = 0
        self.waits: list[float] = []
        self.stop = threading.Event()
        self.stop_at_run = stop_at_run
        self.stop_in_wait = stop_in_wait  # SIGTERM to the supervisor during a backoff

    def run(self) -> int:
        self.runs += 1
        if self.runs == self.stop_at_run:  # SIGTERM to the supervisor during this life
            self.stop.set()
        self.now, code = next(self.lives)
        return code

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        if self.stop_in_wait:
            self.stop.set()
        return self.stop.is_set()

    def keep(self, one_shot: bool = False) -> int:
        return keep_running(
            "pos-speed-views", self.run, self.stop, POLICY, one_shot, "/ckpt",
            clock=lambda: self.now, wait=self.wait,
        )  # fmt: skip


def test_any_death_is_restarted_until_the_budget_is_spent_then_exit_1(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # SIGKILL, a failed query, an unexpected exit 0, SIGTERM from outside: 4 deaths in 60 s.
    driver = FakeDriver([(10, -signal.SIGKILL), (20, 75), (30, 0), (40, -signal.SIGTERM)])
    assert driver.keep() == 1
    assert driver.runs == 4
    assert driver.waits == [2, 4]  # the first restart immediate
    assert "pos-speed-views: driver killed by SIGTERM, its death 4 within 60 s" in caplog.text
    assert "restart budget spent" in caplog.text and "/ckpt" in caplog.text


def test_a_clean_stop_returns_the_drivers_exit_status_without_a_restart() -> None:
    driver = FakeDriver([(10, -signal.SIGKILL), (20, 0)], stop_at_run=2)
    assert driver.keep() == 0
    assert driver.runs == 2
    unclean = FakeDriver([(10, -signal.SIGKILL)], stop_at_run=1)
    assert unclean.keep() == 137


def test_a_stop_during_the_backoff_starts_no_driver() -> None:
    driver = FakeDriver([(10, 75), (11, 75)], stop_in_wait=True)
    assert driver.keep() == 0
    assert driver.runs == 2  # the second death's 2 s backoff was cut short by the stop
    assert driver.waits == [2]


def test_a_one_shot_drivers_exit_0_is_done_and_its_kill_is_restarted() -> None:
    driver = FakeDriver([(10, -signal.SIGKILL), (40, 0)])
    assert driver.keep(one_shot=True) == 0
    assert driver.runs == 2
    assert driver.waits == []


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
