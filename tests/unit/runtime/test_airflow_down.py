"""An Airflow of its own (an integration test's) never outlives the run that started it:
`pos-infra airflow down` and `pos-infra down` stop it from its pid files, and a run
killed with -9 has it stopped by its watcher.

No Airflow runs here: `sleep` stand-ins are launched as its four components, through the
same launcher and pid files (airflow_service.paths(...).process(name)), in a tmp state
dir, so nothing of an Airflow someone else runs is touched.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import airflow_service
from pos_lambda_dev.runtime import cli as infra
from pos_lambda_dev.runtime.process import alive, wait_for


def _stand_ins(instance: Settings) -> dict[str, int]:
    """A `sleep` per Airflow component, pid file and all, as `start` launches them."""
    home = airflow_service.paths(instance)
    return {
        name: home.process(name).launch(["sleep", "600"]) for name in airflow_service.COMPONENTS
    }


def _pid_files(instance: Settings) -> list[str]:
    return sorted(p.name for p in airflow_service.paths(instance).root.glob("*.pid"))


@pytest.fixture
def no_kafka_or_cassandra(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`pos-infra down`'s Kafka and Cassandra as stand-ins that record the call: a unit
    test signals no broker or database, even in a tmp state dir."""
    asked: list[str] = []

    def stand_in(name: str) -> types.SimpleNamespace:
        def stop(settings: Settings) -> bool:
            asked.append(name)
            return False  # "was not running"

        return types.SimpleNamespace(stop=stop)

    for name in ("kafka", "cassandra"):
        monkeypatch.setitem(infra.SERVICES, name, stand_in(name))
    return asked


def test_airflow_down_stops_a_test_runs_airflow_from_its_pid_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = Settings(state_dir=tmp_path / "state")
    test_run = Settings(state_dir=tmp_path / "pytest-of-me" / "state")  # its tmp dir
    airflow_service.register(state, test_run)  # as `owned` does on start
    pids = _stand_ins(test_run)
    # A run killed with -9 left them: `pos-infra airflow down` stops them all.
    assert infra.cmd_airflow(state, argparse.Namespace(action="down")) == 0
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), timeout=10, interval=0.05)
    assert _pid_files(test_run) == []
    home = airflow_service.paths(test_run).root.resolve()
    assert capsys.readouterr().err.splitlines() == [
        "airflow: was not running",
        f"airflow: stopped the one at {home} (a run that started it did not stop it)",
    ]
    assert list((state.state_dir / airflow_service.RUNS_DIR).iterdir()) == []


def test_make_down_stops_every_airflow_of_the_state_dir_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_kafka_or_cassandra: list[str]
) -> None:
    state = Settings(state_dir=tmp_path / "state")
    test_run = Settings(state_dir=tmp_path / "run" / "state")
    airflow_service.register(state, test_run)
    pids = {**_stand_ins(state), **{f"run {n}": p for n, p in _stand_ins(test_run).items()}}
    assert infra.cmd_down(state, argparse.Namespace()) == 0
    assert wait_for(lambda: not any(alive(p) for p in pids.values()), timeout=10, interval=0.05)
    assert (_pid_files(state), _pid_files(test_run)) == ([], [])
    home = airflow_service.paths(test_run).root.resolve()
    assert capsys.readouterr().err.splitlines() == [
        "airflow: stopped",
        f"airflow: stopped the one at {home} (a run that started it did not stop it)",
        "cassandra: was not running",
        "kafka: was not running",
    ]
    assert no_kafka_or_cassandra == ["cassandra", "kafka"]


def test_a_registration_whose_home_is_gone_is_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = Settings(state_dir=tmp_path / "state")
    gone = Settings(state_dir=tmp_path / "gone")
    airflow_service.register(state, gone)
    # Nothing ran anywhere: the state dir's own is named, the registration only dropped.
    assert airflow_service.stop_all(state) == [(airflow_service.paths(state).root, False)]
    assert list((state.state_dir / airflow_service.RUNS_DIR).iterdir()) == []


# The integration fixture's way (tests/integration/test_batch_airflow.py), in a process of
# its own that the test kills: the stand-ins are launched inside `owned`, as `start` would.
CHILD = """
import sys, time
from pathlib import Path
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import airflow_service

state, own = (Settings(state_dir=Path(arg)) for arg in sys.argv[1:3])
with airflow_service.owned(state, own):
    home = airflow_service.paths(own)
    for name in airflow_service.COMPONENTS:
        home.process(name).launch(["sleep", "600"])
    print("up", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_an_owned_airflow_is_stopped_when_its_run_is_killed(
    tmp_path: Path, how: signal.Signals
) -> None:
    state = Settings(state_dir=tmp_path / "state")
    own = Settings(state_dir=tmp_path / "run")
    run = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state.state_dir), str(own.state_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None and run.stdout.readline() == "up\n"
        pids = [airflow_service.paths(own).process(n).pid() for n in airflow_service.COMPONENTS]
        assert all(pids), pids
        run.send_signal(how)  # no `finally` of the run's runs on either
        assert run.wait(timeout=10) == -how
        runs = state.state_dir / airflow_service.RUNS_DIR

        def watcher_done() -> bool:  # every stand-in ended, its pid file and the link gone
            left = [p for p in pids if p is not None and alive(p)]
            return not left and not _pid_files(own) and not list(runs.iterdir())

        assert wait_for(watcher_done, timeout=30, interval=0.05), (
            [p for p in pids if p is not None and alive(p)],
            _pid_files(own),
        )
        home = airflow_service.paths(own).root.resolve()
        assert (home / "logs" / "watcher.log").read_text() == (
            f"airflow: stopped the one at {home}: the run that started it has ended\n"
        )
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGKILL)
            run.wait()
        for name in airflow_service.COMPONENTS:  # should the test fail: no sleeper left
            airflow_service.paths(own).process(name).stop(timeout=5)


def test_an_owned_airflow_is_stopped_and_unregistered_when_its_block_ends(
    tmp_path: Path,
) -> None:
    state = Settings(state_dir=tmp_path / "state")
    own = Settings(state_dir=tmp_path / "run")
    with airflow_service.owned(state, own):
        pids = _stand_ins(own)
        [link] = (state.state_dir / airflow_service.RUNS_DIR).iterdir()
        assert link.resolve() == airflow_service.paths(own).root.resolve()
    assert not any(alive(p) for p in pids.values())
    assert _pid_files(own) == []
    assert list((state.state_dir / airflow_service.RUNS_DIR).iterdir()) == []


@pytest.mark.parametrize("argv", [["--help"], ["watch", "--help"]])
def test_the_watchers_command_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        airflow_service.main(argv)
    assert exit_.value.code == 0
    assert "usage: python -m pos_lambda_dev.runtime.airflow_service" in capsys.readouterr().out
