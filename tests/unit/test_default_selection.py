"""`make test` (pytest with the project's default marker expression) selects the unit and
integration tests and none of the cluster, end-to-end or deploy tests. A conftest hook
that marks items sees the whole session's items: one that marked all of them once left
`make test` running nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_run_selects_unit_and_integration_tests_only() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    dirs = {line.split("/")[1] for line in selected if line.startswith("tests/")}
    assert {"unit", "integration"} <= dirs, dirs
    assert not dirs & {"cluster", "e2e", "deploy"}, dirs
    assert len(selected) > 1000
