"""Options of the end-to-end tests: the chaos run's size and seed, and its other options.

    pytest -m e2e tests/e2e --count 20000 --seed 13 --chaos-args '--rate 200 --batch direct'

pytest reads these only when tests/e2e (or a file in it) is on its command line.
"""

from __future__ import annotations

import argparse
import shlex

import pytest

from pos_lambda_dev.demo import chaos


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "the chaos run (tests/e2e/test_chaos.py)")
    group.addoption(
        "--count",
        type=int,
        default=chaos.DEFAULT_COUNT,
        help=f"unique receipts of the chaos run ({chaos.DEFAULT_COUNT})",
    )
    group.addoption(
        "--seed",
        type=int,
        default=chaos.DEFAULT_SEED,
        help=f"the chaos run's stream and fault-plan seed ({chaos.DEFAULT_SEED})",
    )
    group.addoption(
        "--chaos-args",
        default="",
        help="further pos-chaos options, as one string (`pos-chaos --help` lists them)",
    )

    group = parser.getgroup("upgrade", "the upgrade under load (tests/e2e/test_upgrade.py)")
    group.addoption("--upgrade-count", type=int, default=12000, help="unique receipts (12000)")
    group.addoption("--upgrade-rate", type=float, default=20.0, help="messages per second (20)")


@pytest.fixture
def chaos_args(request: pytest.FixtureRequest) -> argparse.Namespace:
    """The chaos run's arguments, parsed and checked by pos-chaos's own parser."""
    option = request.config.option
    argv = ["--count", str(option.count), "--seed", str(option.seed)]
    argv += shlex.split(option.chaos_args)
    try:
        return chaos.build_parser().parse_args(argv)
    except SystemExit:  # argparse said why on stderr
        pytest.fail(f"bad chaos arguments: {shlex.join(argv)}", pytrace=False)
