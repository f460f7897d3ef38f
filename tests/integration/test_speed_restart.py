"""`pos-speed run` restarts a driver that was SIGKILLed, against real Kafka, Spark and
Cassandra: the views driver is killed once while the stream flows, the supervisor starts
it again at once (the archiver's driver untouched), and the receipts produced after
the kill become visible: the views equal the producer's ledger. Then SIGTERM still
stops everything with exit 0.

Prints the time from the kill to the restarted driver's first committed micro-batch.
"""

from __future__ import annotations

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
from pos_lambda_dev.demo.steps import children, driver_jobs
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

pytestmark = pytest.mark.integration


def _drivers(supervisor: int) -> dict[str, int]:
    """The supervisor's driver processes by the jobs they run (from /proc)."""
    return {jobs: pid for pid in children(supervisor) if (jobs := driver_jobs(pid))}


def test_a_sigkilled_driver_is_restarted_and_receipts_sent_after_the_kill_become_visible(
    isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = isolated
    port = free_port()
    # The warm-up on, as shipped: the first start pays it, the restart must not.
    settings = settings.with_overrides(
        **{"speed_trigger_seconds": 1.0, "speed_metrics_port": port, "speed_warm_up": True}
    )
    ledger = tmp_path / "ledger"
    messages = plan(ledger, count=400, seed=65)
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

    try:

        def views_committed() -> bool:
            running()
            both = set(_drivers(speed.pid)) == {"archiver", "views"}
            return bool(views_commits(settings)) and both

        assert wait_for(views_committed, timeout=600, interval=0.5), tail()
        before = _drivers(speed.pid)
        killed_at = time.time()
        os.kill(before["views"], signal.SIGKILL)
        assert wait_for(lambda: process_gone(before["views"]), timeout=30, interval=0.05)
        last = max(views_commits(settings))  # the killed driver's last commit
        send(settings, messages[half:])  # produced after the kill

        def restarted_and_committed() -> bool:
            running()
            return max(views_commits(settings)) > last

        assert wait_for(restarted_and_committed, timeout=600, interval=0.2), tail()
        first = min(i for i in views_commits(settings) if i > last)
        took = views_commits(settings)[first] - killed_at
        print(f"\nkill -9 of the views driver -> its restarted driver's first commit: {took:.1f} s")

        def converged() -> bool:
            running()
            return views_match_ledger(cql, ledger)

        assert wait_for(converged, timeout=600, interval=1), tail()
        after = _drivers(speed.pid)
        assert after["archiver"] == before["archiver"]  # the other driver never noticed
        assert after["views"] != before["views"]
        text = log.read_text()
        assert (
            "pos-speed-views: driver killed by SIGKILL; restarting from its checkpoint in 0 s "
            "(restart 1 of 5 within 600 s)" in text
        ), tail()
        # Its JVM, which outlived it, was ended before the new driver started.
        assert "pos-speed-views: ended what its dead driver left behind (pids [" in text
        # The views driver warmed up once, at its first start; the restarted one went
        # straight to its replay (the backlog since the kill waits for it).
        assert text.count("pos-speed-views warmed up in") == 1, tail()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as got:
            metrics = got.read().decode()
        assert 'pos_speed_driver_restarts_total{query="pos-speed-views"} 1.0' in metrics
        assert 'pos_speed_driver_restarts_total{query="pos-speed-archiver"} 0.0' in metrics

        speed.send_signal(signal.SIGTERM)  # a clean stop after a restart: still exit 0
        assert speed.wait(timeout=120) == 0, tail()
    finally:
        if speed.poll() is None:
            os.killpg(speed.pid, signal.SIGKILL)
            speed.wait()
        out.close()
    assert_views_match_ledger(cql, ledger)
