"""`pos-chaos` is a thin entry point: the e2e test through pytest, with its arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from pos_lambda_dev.demo import chaos
from pos_lambda_dev.demo.faults import oversized_malformed

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


@pytest.mark.parametrize(
    ("text", "window"),
    [("0,0.15", (0.0, 0.15)), ("0.05,0.85", (0.05, 0.85)), ("0.2,1", (0.2, 1.0))],
)
def test_the_fault_window_is_two_fractions(text: str, window: tuple[float, float]) -> None:
    assert chaos.build_parser().parse_args(["--fault-window", text]).fault_window == window


@pytest.mark.parametrize("text", ["0.15", "a,b", "0.5,0.2", "0,1.5", "-0.1,0.5"])
def test_a_bad_fault_window_is_refused(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        chaos.build_parser().parse_args(["--fault-window", text])
    assert "--fault-window" in capsys.readouterr().err


def test_the_oversized_messages_count_in_the_ledgers_summary() -> None:
    summary = {
        "messages": 5_091, "faults": {"malformed": 25, "resend": 30},
        "malformed_kinds": {"broken_json": 25},
    }  # fmt: skip
    faults = [{"malformed_kind": "oversized_message"}] * 3
    assert oversized_malformed.with_oversized(summary, faults) == {
        "messages": 5_094, "faults": {"malformed": 28, "resend": 30},
        "malformed_kinds": {"broken_json": 25, "oversized_message": 3},
    }  # fmt: skip
    assert summary["messages"] == 5_091  # the input is left as it was
