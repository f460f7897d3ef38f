"""`pos-batch` refuses contradictory arguments before any Spark session starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pos_lambda.batch_layer import cli
from pos_lambda.batch_layer.pointer import CommitConflict

INTERVAL = ["--start", "2026-03-02T08:00Z", "--end", "2026-03-02T09:00Z"]


def test_a_quality_check_after_a_pinned_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # A pinned run serves nothing: the check would compare views it did not commit.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", *INTERVAL, "--delta-version", "3", "--quality"])
    assert exit_.value.code == 2
    assert "--quality checks the served views; a pinned run serves nothing" in (
        capsys.readouterr().err
    )


def test_a_run_before_the_master_dataset_exists_says_so_in_one_line_and_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Decided from the Delta log's file names before any Spark session starts (this
    # test starts none: a JVM here would take seconds and print Spark's warnings).
    monkeypatch.setenv("POS_DATA_DIR", str(tmp_path))
    assert cli.EXIT_NOTHING_TO_DO == 4
    for command in (["run", *INTERVAL], ["rebuild"]):
        assert cli.main(command) == 4
        out, err = capsys.readouterr()
        reason = (
            f"no master dataset yet: {tmp_path / 'master'} holds no Delta commit; the "
            "speed layer's archiver (`pos-speed run`) creates it with its first micro-batch"
        )
        assert err == f"pos-batch {command[0]}: nothing to do yet: {reason}\n"
        assert json.loads(out) == {"nothing_to_do": reason}


def _losing(times: int) -> tuple[list[int], Callable[[], str]]:
    """A run that loses the pointer's compare-and-set `times` times, then commits."""
    calls: list[int] = []

    def run_once() -> str:
        calls.append(len(calls) + 1)
        if len(calls) <= times:
            raise CommitConflict(f"the pointer moved (try {len(calls)})")
        return "committed"

    return calls, run_once


def test_a_lost_commit_is_recomputed_at_once_up_to_the_retries() -> None:
    calls, run_once = _losing(2)
    assert cli.until_committed(run_once, 2) == "committed"
    assert calls == [1, 2, 3]
    calls, run_once = _losing(3)
    with pytest.raises(CommitConflict, match=r"try 3"):
        cli.until_committed(run_once, 2)
    assert calls == [1, 2, 3]
    calls, run_once = _losing(1)
    with pytest.raises(CommitConflict, match=r"try 1"):
        cli.until_committed(run_once, 0)  # --conflict-retries 0: the old exit 3 at once
    assert calls == [1]


def test_other_failures_are_not_retried() -> None:
    calls: list[int] = []

    def broken() -> str:
        calls.append(1)
        raise RuntimeError("Cassandra is down")

    with pytest.raises(RuntimeError, match="Cassandra is down"):
        cli.until_committed(broken, 2)
    assert calls == [1]


def test_run_help_names_the_conflict_retries(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--conflict-retries CONFLICT_RETRIES" in out
    assert "(default 2; 0: exit 3 on the first conflict;" in out


def test_negative_conflict_retries_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", *INTERVAL, "--conflict-retries", "-1"])
    assert exit_.value.code == 2
    assert "must be a whole number >= 0, got -1" in capsys.readouterr().err
