"""Shared test helpers (no services here: see tests/integration/conftest.py)."""

import logging
import os

import pytest
from hypothesis import settings

# py4j's gateway objects log "Closing down clientserver connection" at INFO from their
# finalisers, after pytest has closed its capture streams: a "--- Logging error ---"
# traceback at the very end of every run. Its warnings and errors still show.
logging.getLogger("py4j").setLevel(logging.WARNING)

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (default: "default").
#   default  a fixed seed (derandomize): every run draws the same examples, so a red test
#            is red again on the next run; property tests keep their own bounded example
#            counts (the exactly-once properties, tests/unit/transactional: ~20 s in all).
#   long     a fresh random seed and thousands of examples per property, for a search:
#            HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest \
#                tests/unit/transactional/test_exactly_once_properties.py
#            (the exactly-once properties print examples, distinct fault schedules and
#            failing examples at the end of the run).
settings.register_profile("default", derandomize=True, deadline=None, print_blob=True)
settings.register_profile(
    "long", max_examples=3000, derandomize=False, deadline=None, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial",
        choices=("include", "exclude", "only"),
        default="include",
        help="tests marked `serial`: run them with the others (include, the default), leave "
        "them out (exclude: the parallel part of `make test`) or run only them (only: its "
        "serial part)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect by `--serial` (the marker expression already ran: this narrows it)."""
    choice = config.getoption("--serial")
    if choice == "include":
        return
    want = choice == "only"
    kept, dropped = [], []
    for item in items:
        (kept if (item.get_closest_marker("serial") is not None) == want else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
