"""`pos-batch` refuses contradictory arguments before any Spark session starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pos_lambda.batch_layer import cli

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
