"""`.env` holds the deploy secrets: git must ignore it, and keep tracking `.env.example`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pos_lambda.settings import PROJECT_ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists(),
    reason="needs git and a git checkout (the image has neither)",
)


def _ignored(path: str) -> bool:
    # --no-index: judge the rules alone, whether or not the path is tracked today.
    result = subprocess.run(
        ["git", "check-ignore", "--quiet", "--no-index", path],
        cwd=PROJECT_ROOT,
        check=False,
    )
    assert result.returncode in (0, 1), f"git check-ignore failed on {path}"
    return result.returncode == 0


def test_env_file_is_ignored() -> None:
    assert _ignored(".env") is True


def test_env_example_is_not_ignored_and_stays_tracked() -> None:
    assert _ignored(".env.example") is False
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", ".env.example"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        check=False,
    )
    assert tracked.returncode == 0
