"""Shared test helpers (no services here: see tests/integration/conftest.py)."""

import logging
import os
from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import property_tally

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
#            failing examples at the end of the run, under pytest-xdist too:
#            tests/support/property_tally.py).
settings.register_profile("default", derandomize=True, deadline=None, print_blob=True)
settings.register_profile(
    "long", max_examples=3000, derandomize=False, deadline=None, print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


TESTS = Path(__file__).resolve().parent

# The layer each test file touches, for the developer loop: `make test-speed`,
# `test-batch`, `test-serving`, `test-processors` run one layer's unit and integration
# tests (`--layer`); the markers serve `-m` too (docs/testing.md). fnmatch patterns on
# the path under tests/ (`*` crosses a `/`); a file may belong to several layers (the
# shared core to speed and batch). A file that belongs to none says so under "other":
# every test file must match a layer or "other", never both, and every file named here
# must exist (tests/unit/test_layers.py), so a new file cannot silently escape every layer.
LAYERS: dict[str, tuple[str, ...]] = {
    "speed": (
        "unit/speed_layer/*",
        "unit/views/*",  # the shared core: validation, winner rule, aggregation
        "unit/schemas/*",  # the data contract every consumer validates with
        "unit/adapters/test_archive_offsets.py",
        "unit/adapters/test_class_archive.py",
        "unit/adapters/test_driver_lookup.py",
        "unit/adapters/test_driver_writes.py",
        "unit/adapters/test_kafka_source_options.py",
        "unit/adapters/test_memory_store.py",
        "unit/adapters/test_spark_python_daemon.py",
        "integration/test_speed_*.py",
        "integration/test_archive_offsets.py",
        "integration/test_class_archive.py",
        "integration/test_contract_versions.py",
        "integration/test_dead_letter_replay.py",
        "integration/test_driver_lookup.py",
        "integration/test_driver_writes.py",
        "integration/test_progress_listener.py",
        "integration/test_spark_cluster.py",
        "integration/test_view_store.py",
    ),
    "batch": (
        "unit/batch_layer/*",
        "unit/dags/*",
        "unit/views/*",
        "unit/schemas/*",
        "unit/adapters/test_archive_offsets.py",  # the DAG waits on the archiver's offsets
        "unit/adapters/test_driver_lookup.py",
        "unit/adapters/test_master_dataset_missing.py",
        "integration/test_batch_*.py",
        "integration/test_airflow_runtime.py",
        "integration/test_archive_offsets.py",
        "integration/test_contract_versions.py",
        "integration/test_spark_cluster.py",
    ),
    "serving": (
        "unit/serving/*",
        "unit/stores/*",  # stores as data: local days, opening hours
        "integration/test_serving*.py",
        "integration/test_local_days.py",
        "integration/test_receipt_status.py",
        "integration/test_stores_*.py",
    ),
    # The transactional processors: alerts (and their sink), pos.receipts, their shell.
    "processors": (
        "unit/alerts/*",
        "unit/dedup/*",
        "unit/transactional/*",
        "unit/schemas/*",
        "unit/stores/*",  # the silence rule keeps each store's hours
        "integration/test_alerts_*.py",
        "integration/test_receipts_*.py",
        "integration/test_input_growth.py",
        "integration/test_processor_*.py",
    ),
    # Everything else: producer, audit, runtime, provisioning, deploy, benchmarks, demo,
    # the repository's own rules; the cluster, end-to-end and deploy tiers.
    "other": (
        "unit/adapters/test_schema_migrations.py",
        "unit/audit/*",
        "unit/bench/*",
        "unit/demo/*",
        "unit/deploy/*",
        "unit/infra/*",
        "unit/producer/*",
        "unit/provision/*",
        "unit/runtime/*",
        "unit/test_*.py",
        "integration/test_audit.py",
        "integration/test_bench_poller.py",
        "integration/test_producer_kafka.py",
        # Metrics and alert rules: a real Prometheus scrapes speed, alerts and serving
        # (~2.5 min); with unit/infra/, not in three layers' runs.
        "integration/test_prometheus.py",
        "integration/test_runtime.py",
        "cluster/*",
        "deploy/*",
        "e2e/*",
    ),
}


# The slowest test files, longest first, with the seconds they took in a run of `make
# test` on two workers (measured 2026-12-05, issue 76; docs/testing.md). `make test`
# hands each file whole to a worker (`--dist loadfile`) in the order collected, with
# `--no-loadscope-reorder`: these go first, the rest after in path order. pytest-xdist's
# own order (most tests first) dealt the long files of one or two tests (Airflow, the
# Prometheus alert, a restarted driver) out last, and a worker ran one alone at the end.
# The figures only order the files: a file missing here, or slower than said, is no error.
LONGEST_FIRST: dict[str, int] = {
    "integration/test_batch_layer.py": 300,
    "integration/test_speed_hostile.py": 260,
    "integration/test_batch_airflow.py": 240,
    "integration/test_batch_rebuild_races.py": 230,
    "integration/test_speed_faults.py": 200,
    "integration/test_speed_layer.py": 160,
    "integration/test_serving.py": 150,
    "integration/test_prometheus.py": 140,
    "integration/test_local_days.py": 110,
    "integration/test_speed_restart.py": 95,
    "integration/test_input_growth.py": 90,
    "integration/test_spark_cluster.py": 85,
    "integration/test_audit.py": 80,
    "integration/test_receipt_status.py": 70,
    "integration/test_dead_letter_replay.py": 65,
    "integration/test_class_archive.py": 55,
    "integration/test_processor_broker_errors.py": 45,
    "unit/speed_layer/test_views_batch.py": 60,
    "unit/speed_layer/test_supervisor_standby.py": 20,
    "unit/views/test_native_check.py": 20,
    "unit/views/test_winners.py": 20,
    "unit/views/test_records.py": 15,
}


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place: the files of LONGEST_FIRST first, longest first, then the
    others in their collected order; each file's tests keep theirs."""
    position: dict[Path, int] = {}
    for item in items:
        position.setdefault(item.path, len(position))

    def cost(path: Path) -> int:
        try:
            relative = path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            return 0
        return LONGEST_FIRST.get(relative, 0)

    costs = {path: cost(path) for path in position}
    items.sort(key=lambda item: (-costs[item.path], position[item.path]))


def layers_of(path: Path) -> list[str]:
    """The layers (or "other") whose patterns match a test file (none outside tests/)."""
    try:
        relative = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return []
    return [layer for layer, globs in LAYERS.items() if any(fnmatch(relative, g) for g in globs)]


def pytest_configure(config: pytest.Config) -> None:
    for layer in LAYERS:
        config.addinivalue_line(
            "markers", f"{layer}: touches the {layer} layer (by path: LAYERS in tests/conftest.py)"
        )
    property_tally.register(config)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial",
        choices=("include", "exclude", "only"),
        default="include",
        help="tests marked `serial`: run them with the others (include, the default), leave "
        "them out (exclude: the parallel part of `make test`) or run only them (only: its "
        "serial part)",
    )
    parser.addoption(
        "--layer",
        choices=tuple(LAYERS),
        help="only the tests of this layer (LAYERS in tests/conftest.py), within the marker "
        "expression: `make test-speed` and the like",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item with its layers, then narrow by `--layer` and `--serial`. First of
    the hooks: the marker expression (`-m`), applied after, sees the layers' markers."""
    layers: dict[Path, list[str]] = {}
    for item in items:
        if item.path not in layers:
            layers[item.path] = layers_of(item.path)
        for layer in layers[item.path]:
            item.add_marker(layer)
    layer = config.getoption("--layer")
    serial = config.getoption("--serial")
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        wanted = layer is None or item.get_closest_marker(layer) is not None
        if serial != "include":
            wanted &= (item.get_closest_marker("serial") is not None) == (serial == "only")
        (kept if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    longest_first(kept)
    items[:] = kept
