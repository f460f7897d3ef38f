"""bench/ is a package run from the checkout's root (`python -m bench.NAME`); the tests
import it from there too (the root is on sys.path: pytest's rootdir, tests/ a package)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def refusal() -> Callable[..., str]:
    """refusal(name, *args): run `python -m bench.<name>` with args, expect argparse's
    refusal (exit 2), and return what it said on stderr."""

    def run(name: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{name}", *args],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        return done.stderr

    return run
