"""bench/ holds scripts, not a package: its modules import each other as top-level names
(`import results`), so the tests put bench/ on sys.path the same way running a script does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


@pytest.fixture
def refusal() -> Callable[..., str]:
    """refusal(script, *args): run bench/<script> with args, expect argparse's refusal
    (exit 2), and return what it said on stderr."""

    def run(script: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(BENCH / script), *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        return done.stderr

    return run
