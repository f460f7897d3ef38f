"""With POS_SPEED_STANDBY, a SIGKILLed views driver's standby takes over, against real
Kafka, Spark and Cassandra: the standby that stood by becomes the views driver (the
archiver's driver untouched), the receipts produced after the kill become visible (the
views equal the producer's ledger), the takeover is logged and counted as a restart, and
a new standby is started once the new driver is ready. Then SIGTERM stops everything,
the standbys too, with exit 0.

Prints the time from the kill to the first micro-batch the standby committed (the goal:
a median of 15 s or less, against 25-40 s for a fresh driver, test_speed_restart.py); no
wall-clock bound is asserted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.settings import Settings
from pos_lambda_dev.demo.steps import children, driver_jobs, standby_jobs
from tests.integration.speed_helpers import (
    VENV_BIN,
    assert_views_match_ledger,
    env_for,
    free_port,
    plan,
    process_gone,
    send,
    views_commits,
    views_match_ledger,
)

# CI's chaos run (.ci/run: POS_SPEED_STANDBY=true) strikes three takeovers mid-stream
# with its exact audit; here alone it is `make test-faults`.
pytestmark = [pytest.mark.integration, pytest.mark.chaos_also]


def _roles(supervisor: int) -> tuple[dict[str, int], dict[str, int]]:
    """The supervisor's drivers and its waiting standbys, by the jobs they run (/proc)."""
    drivers: dict[str, int] = {}
    standbys: dict[str, int] = {}
    for pid in children(supervisor):
        if jobs := driver_jobs(pid):
            drivers[jobs] = pid
        elif jobs := standby_jobs(pid):
            standbys[jobs] = pid
    return drivers, standbys


def test_a_sigkilled_drivers_standby_takes_over_and_a_new_standby_follows(
    isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = isolated
    port = free_port()
    # The warm-up on, as shipped: the standby warms up before it stands by.
    settings = settings.with_overrides(
        **{
            "speed_trigger_seconds": 1.0,
            "speed_metrics_port": port,
            "speed_warm_up": True,
            "speed_standby": True,
            # Not the 30 s that spare a takeover's replay (unit-tested in
            # test_supervision.py): the standbys here start 5 s after their driver is ready.
            "speed_standby_after_ready_seconds": 5.0,
        }
    )
    ledger = tmp_path / "ledger"
    messages = plan(ledger, count=400, seed=66)
    half = len(messages) // 2
    send(settings, messages[:half])
    log = tmp_path / "speed.log"
    out = open(log, "wb")  # noqa: SIM115 - closed below
    speed = subprocess.Popen(
        [str(VENV_BIN / "pos-speed"), "run"],
        env=env_for(settings),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def running() -> None:
        if speed.poll() is not None:
            raise AssertionError(f"pos-speed run exited {speed.returncode}:\n{tail()}")

    def tail() -> str:
        return log.read_text()[-5000:]

    def stands_by(pid: int) -> bool:
        return f"pos-speed-views: standby driver (pid {pid}) standing by" in log.read_text()

    try:

        def committed_and_standing_by() -> bool:
            running()
            drivers, standbys = _roles(speed.pid)
            return (
                bool(views_commits(settings))
                and set(drivers) == {"archiver", "views"}
                and "views" in standbys
                and stands_by(standbys["views"])
            )

        assert wait_for(committed_and_standing_by, timeout=900, interval=0.5), tail()
        before, standbys = _roles(speed.pid)
        standby = standbys["views"]
        killed_at = time.time()
        os.kill(before["views"], signal.SIGKILL)
        assert wait_for(lambda: process_gone(before["views"]), timeout=30, interval=0.05)
        last = max(views_commits(settings))  # the killed driver's last commit
        send(settings, messages[half:])  # produced after the kill

        def taken_over_and_committed() -> bool:
            running()
            return max(views_commits(settings)) > last

        assert wait_for(taken_over_and_committed, timeout=600, interval=0.2), tail()
        first = min(i for i in views_commits(settings) if i > last)
        took = views_commits(settings)[first] - killed_at
        print(f"\nkill -9 of the views driver -> its standby's first commit: {took:.1f} s")

        def converged() -> bool:
            running()
            return views_match_ledger(cql, ledger)

        assert wait_for(converged, timeout=600, interval=1), tail()
        after, _ = _roles(speed.pid)
        assert after["views"] == standby, tail()  # the standby is the views driver now
        assert after["archiver"] == before["archiver"]  # the other driver never noticed
        text = log.read_text()
        assert (
            "pos-speed-views: driver killed by SIGKILL; restarting from its checkpoint in 0 s "
            "(restart 1 of 5 within 600 s)" in text
        ), tail()
        assert f"pos-speed-views: standby driver (pid {standby}) takes over" in text, tail()
        # Its JVM, which outlived it, was ended before the standby started the query.
        assert "pos-speed-views: ended what its dead driver left behind (pids [" in text

        def a_new_standby_stands_by() -> bool:
            running()
            new = _roles(speed.pid)[1].get("views")
            return new is not None and new != standby and stands_by(new)

        assert wait_for(a_new_standby_stands_by, timeout=900, interval=0.5), tail()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
            metrics = got.read().decode()
        assert 'pos_speed_driver_restarts_total{query="pos-speed-views"} 1.0' in metrics
        assert 'pos_speed_driver_restarts_total{query="pos-speed-archiver"} 0.0' in metrics
        assert 'pos_speed_standby_up{query="pos-speed-views"} 1.0' in metrics
        assert 'pos_speed_driver_up{query="pos-speed-views"} 1.0' in metrics

        speed.send_signal(signal.SIGTERM)  # a clean stop, standbys and all: still exit 0
        assert speed.wait(timeout=180) == 0, tail()

        def session_gone() -> bool:  # drivers, standbys, their JVMs: nothing left
            try:
                os.killpg(speed.pid, 0)
            except ProcessLookupError:
                return True
            return False

        assert wait_for(session_gone, timeout=60, interval=0.2), tail()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(speed.pid, signal.SIGKILL)
        if speed.poll() is None:
            speed.wait()
        out.close()
    assert_views_match_ledger(cql, ledger)
