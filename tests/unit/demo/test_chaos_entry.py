"""`pos-chaos` is a thin entry point: the e2e test through pytest, with its arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from pos_lambda.demo import chaos

ROOT = Path("/repo")
TEST = "/repo/tests/e2e/test_chaos.py"


def test_count_and_seed_become_the_tests_options_the_rest_goes_in_chaos_args() -> None:
    argv = ["--rate", "200", "--count=20000", "--keep-airflow", "--seed", "7", "--out", "a b"]
    assert chaos.pytest_argv(argv, ROOT) == [
        TEST, "-m", "e2e", "-s", "--count", "20000", "--seed", "7",
        "--chaos-args=--rate 200 --keep-airflow --out 'a b'",
    ]  # fmt: skip


def test_the_defaults_are_the_documented_run() -> None:
    assert chaos.pytest_argv([], ROOT) == [
        TEST, "-m", "e2e", "-s", "--count", "100000", "--seed", "13", "--chaos-args=",
    ]  # fmt: skip


def test_without_the_tests_directory_it_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert chaos.main(["--count", "10"], root=tmp_path) == 2
    err = capsys.readouterr().err
    assert "tests/e2e/test_chaos.py is not here" in err
    assert "run it from a checkout" in err


def test_bad_arguments_fail_before_pytest_starts(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        chaos.main(["--count", "0"], root=tmp_path)
    assert exit_.value.code == 2
