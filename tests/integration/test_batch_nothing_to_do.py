"""`pos-batch run` before the master dataset exists: real Spark and Delta, empty data
dirs in each state the archiver's first micro-batch passes through."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.batch_layer import job
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.pointer import NothingToDo
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import VENV_BIN, env_for

pytestmark = pytest.mark.integration

HOUR = Interval(datetime(2026, 3, 2, 8, tzinfo=UTC), datetime(2026, 3, 2, 9, tzinfo=UTC))


def _before_first_commit(data_dir: Path, state: str) -> None:
    """The master dataset's directory as the archiver leaves it before its first commit."""
    master = data_dir / "master"
    if state == "data files, no log":
        (master / "event_day=2026-03-02").mkdir(parents=True)
        (master / "event_day=2026-03-02" / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    elif state == "an empty log":
        (master / "_delta_log").mkdir(parents=True)


@pytest.mark.parametrize("state", ["no directory", "data files, no log", "an empty log"])
def test_a_run_in_spark_before_the_first_commit_raises_nothing_to_do(
    spark: Any, settings: Settings, tmp_path: Path, state: str
) -> None:
    # The library's own check, through Delta in the JVM (the CLI decides before Spark).
    _before_first_commit(tmp_path, state)
    empty = settings.with_overrides(data_dir=tmp_path)
    with pytest.raises(NothingToDo) as nothing:
        job.run(spark, empty, HOUR)
    assert str(nothing.value) == (
        f"no master dataset yet: {tmp_path / 'master'} is not a Delta table; the speed "
        "layer's archiver (`pos-speed run`) creates it with its first micro-batch"
    )


def test_pos_batch_run_on_an_empty_data_dir_says_so_in_one_line_and_exits_4(
    settings: Settings, tmp_path: Path
) -> None:
    _before_first_commit(tmp_path, "an empty log")
    done = subprocess.run(
        [str(VENV_BIN / "pos-batch"), "run", "--quality", "--start", HOUR.start.isoformat(),
         "--end", HOUR.end.isoformat()],
        env=env_for(settings.with_overrides(data_dir=tmp_path)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr[-3000:]
    assert done.stderr.splitlines() == [
        f"pos-batch run: nothing to do yet: no master dataset yet: {tmp_path / 'master'} "
        "holds no Delta commit; the speed layer's archiver (`pos-speed run`) creates it "
        "with its first micro-batch"
    ]
