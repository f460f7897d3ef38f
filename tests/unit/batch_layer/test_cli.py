"""`pos-batch` refuses contradictory arguments before any Spark session starts."""

from __future__ import annotations

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
