"""`supervise` with real processes, stand-ins for the Spark drivers (no Spark, no
services): they speak the supervisor's protocol (ready, standing by, the word) and log
what they do. A killed driver's standby takes over and a new standby follows; a standby
killed while it waits is started again; SIGTERM ends them all and exits 0; a spent
budget ends the standby and exits 1. Without POS_SPEED_STANDBY, a fresh driver restarts.
And the standby's side of the protocol: the word, and who may start a standby.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.speed_layer import supervisor
from pos_lambda_dev.demo.steps import driver_jobs, standby_jobs

STAND_IN = """
import os, signal, sys, threading
from pos_lambda.speed_layer import supervisor

jobs = sys.argv[sys.argv.index("--jobs") + 1]


def say(what):
    with open(os.environ["STAND_IN_LOG"], "a") as log:
        log.write(f"{os.getpid()} {jobs} {what}\\n")


stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
supervisor.die_with_supervisor()
if "--standby" in sys.argv:
    word = supervisor.hear_word()
    supervisor.report_standing_by()
    say("standing by")
    while not (stop.is_set() or word.heard.wait(0.05)):
        pass
    if stop.is_set() or not word.go:
        say("stood down")
        sys.exit(0)
    supervisor.name_this_process(supervisor.TOOK_OVER_NAME)
    say("took over")
else:
    say("started, warm-up " + os.environ.get(supervisor.WARM_UP_ENV, "as set"))
supervisor.report_ready()
say("ready")
while not stop.wait(0.05):
    pass
say("stopped")
"""

SUPERVISOR = """
import logging, sys
from pos_lambda.settings import load_settings
from pos_lambda.speed_layer.supervisor import Driver, supervise

logging.basicConfig(level=logging.INFO, format="%(message)s")
drivers = [Driver(("archiver",)), Driver(("views",))]
sys.exit(supervise(load_settings(), drivers, ["run"], command=[sys.executable, sys.argv[1]]))
"""


class Run:
    """`supervise` in a process of its own (it becomes a subreaper and takes signals)."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        stand_in = tmp_path / "stand_in.py"
        stand_in.write_text(STAND_IN)
        self.log = tmp_path / "stand-in.log"
        self.log.touch()
        self.process = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, str(stand_in)],
            env={
                **os.environ,
                "STAND_IN_LOG": str(self.log),
                "POS_DATA_DIR": str(tmp_path / "data"),
                "POS_SPEED_RESTART_BACKOFF_SECONDS": "0",  # a standby's: the 1 s floor
                "POS_SPEED_STANDBY_AFTER_READY_SECONDS": "0",
                **env,
            },
            stderr=subprocess.PIPE,
            text=True,
        )

    def pids(self, jobs: str, what: str) -> list[int]:
        """The stand-ins of `jobs` that said `what`, first first."""
        lines = [line.split(" ", 2) for line in self.log.read_text().splitlines()]
        return [int(pid) for pid, j, said in lines if j == jobs and said.startswith(what)]

    def said(self, pid: int) -> list[str]:
        lines = [line.split(" ", 2) for line in self.log.read_text().splitlines()]
        return [said for p, _, said in lines if int(p) == pid]

    def await_(self, condition: object) -> None:
        assert callable(condition)
        if not wait_for(lambda: self.process.poll() is None and condition(), 60, 0.05):
            self.process.kill()
            raise AssertionError(f"log:\n{self.log.read_text()}\n{self.process.communicate()[1]}")

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=60)
        return self.process.returncode, err


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_killed_drivers_standby_takes_over_a_new_one_follows_and_a_stop_ends_all(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path, POS_SPEED_STANDBY="true")
    run.await_(lambda: run.pids("views", "standing by") and run.pids("archiver", "standing by"))
    [driver] = run.pids("views", "ready")
    [standby] = run.pids("views", "standing by")
    archiver = run.pids("archiver", "ready") + run.pids("archiver", "standing by")
    # /proc tells a waiting standby from a driver (the chaos run kills the driver).
    assert (driver_jobs(driver), standby_jobs(driver)) == ("views", None)
    assert (driver_jobs(standby), standby_jobs(standby)) == (None, "views")

    os.kill(driver, signal.SIGKILL)
    run.await_(
        lambda: standby in run.pids("views", "ready") and run.pids("views", "standing by")[1:]
    )
    assert run.said(standby) == ["standing by", "took over", "ready"]
    assert (driver_jobs(standby), standby_jobs(standby)) == ("views", None)
    # The other driver and its standby never noticed: nothing of theirs was ended.
    assert not [pid for pid in archiver if _gone(pid)]

    # A standby killed while it waits is started again (after its backoff).
    [*_, second] = run.pids("views", "standing by")
    os.kill(second, signal.SIGKILL)
    run.await_(lambda: run.pids("views", "standing by")[2:])
    [*_, third] = run.pids("views", "standing by")

    code, err = run.stop()
    assert code == 0, err
    assert run.said(standby)[-1] == "stopped"
    assert run.said(third)[-1] == "stood down"  # it left without starting anything
    every = {int(line.split()[0]) for line in run.log.read_text().splitlines()}
    assert all(_gone(pid) for pid in every)
    assert (
        "pos-speed-views: driver killed by SIGKILL; restarting from its checkpoint in 0 s "
        "(restart 1 of 5 within 600 s)" in err
    )
    assert f"pos-speed-views: standby driver (pid {standby}) takes over" in err
    assert "pos-speed-views: standby killed by SIGKILL; another in 1 s" in err
    assert "pos-speed-archiver: driver" not in err


def test_without_standby_a_killed_driver_is_restarted_fresh_without_its_warm_up(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path)
    run.await_(lambda: run.pids("views", "ready") and run.pids("archiver", "ready"))
    [driver] = run.pids("views", "ready")
    assert run.said(driver)[0] == "started, warm-up as set"
    os.kill(driver, signal.SIGKILL)
    run.await_(lambda: run.pids("views", "ready")[1:])
    [_, fresh] = run.pids("views", "ready")
    assert run.said(fresh)[0] == "started, warm-up false"
    code, err = run.stop()
    assert code == 0, err
    assert not run.pids("views", "standing by") and not run.pids("archiver", "standing by")
    assert "restarting from its checkpoint in 0 s (restart 1 of 5 within 600 s)" in err


def test_a_spent_budget_ends_the_standbys_and_exits_1(tmp_path: Path) -> None:
    run = Run(tmp_path, POS_SPEED_STANDBY="true", POS_SPEED_MAX_RESTARTS="0")
    run.await_(lambda: run.pids("views", "standing by") and run.pids("archiver", "standing by"))
    [driver] = run.pids("views", "ready")
    os.kill(driver, signal.SIGKILL)
    _, err = run.process.communicate(timeout=60)
    assert run.process.returncode == 1, err
    assert "pos-speed-views: driver killed by SIGKILL, its death 1 within 600 s" in err
    for jobs in ("views", "archiver"):
        [standby] = run.pids(jobs, "standing by")
        assert run.said(standby)[-1] == "stood down"
    [archiver] = run.pids("archiver", "ready")
    assert run.said(archiver)[-1] == "stopped"


def test_a_standby_hears_go_or_a_closed_pipe_that_tells_it_to_stand_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for word_said, goes in ((supervisor.GO, True), (b"", False)):
        ours, theirs = os.pipe()
        monkeypatch.setenv(supervisor.GO_FD_ENV, str(ours))
        word = supervisor.hear_word()
        assert supervisor.GO_FD_ENV not in os.environ  # not for the JVM and its workers
        os.write(theirs, word_said)
        os.close(theirs)
        assert word.heard.wait(10)
        assert word.go is goes
    with pytest.raises(RuntimeError, match="only `pos-speed run` starts standbys"):
        supervisor.hear_word()


def test_only_the_supervisor_starts_a_standby(capsys: pytest.CaptureFixture[str]) -> None:
    from pos_lambda.speed_layer import cli

    for argv in (["run", "--standby"], ["run", "--driver", "--standby"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        assert "--standby: only `pos-speed run` starts standbys" in capsys.readouterr().err
