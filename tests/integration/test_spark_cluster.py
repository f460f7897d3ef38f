"""The cluster path on one machine: the speed layer and the batch job against a Spark
standalone master and worker (the pinned PySpark's own daemons, started by
`pos_lambda_dev.runtime.spark_service` as `pos-infra spark up` does), not `local[*]`.

The jobs run as users run them (`pos-speed run --available-now`, `pos-batch run`) with
only POS_SPARK_MASTER pointing at the cluster, so the jars travel from the driver to the
executors, the Python UDFs run in the executors' Python workers, and the checkpoints
and the Delta master dataset are written by executors in another JVM. Expected values
come from the producer's ledger, never from the code under test.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import spark_service
from pos_lambda_dev.runtime.process import port_open
from tests.integration.speed_helpers import (
    VENV_BIN,
    assert_views_match_ledger,
    env_for,
    expected_aggregates,
    ledger_receipts,
    simulate,
)
from tests.integration.test_batch_layer import served_aggregates, served_receipts
from tests.integration.test_speed_layer import FAULTS

pytestmark = pytest.mark.integration

SPARK_PORTS = (
    "spark_master_port",
    "spark_master_webui_port",
    "spark_worker_port",
    "spark_worker_webui_port",
)


def _free_ports(n: int) -> list[int]:
    """n distinct ports free on 127.0.0.1 now (held open together, so no repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def cluster(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A standalone master + worker of its own (state dir, ports), stopped at the end
    whatever happens, so a `make spark` cluster of the user's is never touched."""
    s = services.with_overrides(
        **{
            "state_dir": tmp_path_factory.mktemp("spark-state"),
            **dict(zip(SPARK_PORTS, _free_ports(len(SPARK_PORTS)), strict=True)),
        }
    )
    spark_service.start(s)
    try:
        yield s
    finally:
        spark_service.stop(s)


def _run(argv: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env_for(settings), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


def test_speed_and_batch_on_a_standalone_cluster_equal_the_ledger(
    cluster: Settings, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = isolated
    url = spark_service.master_url(cluster)
    assert url.startswith("spark://127.0.0.1:")
    state = spark_service.master_state(cluster)
    assert state is not None and state["aliveworkers"] == 1
    assert [w["host"] for w in state["workers"]] == ["127.0.0.1"]

    jobs = settings.with_overrides(**{"spark_master": url})
    ledger = tmp_path / "ledger"
    summary = simulate(jobs, ledger, "--count", "1500", "--seed", "29", *FAULTS)
    faults = summary["faults"]
    assert faults["resend"] > 0 and faults["malformed"] > 0 and faults["late"] > 0

    # 1. Speed layer: resends absorbed, late receipts in their windows, malformed
    # messages dead-lettered, all through executors on the worker.
    _run([str(VENV_BIN / "pos-speed"), "run", "--available-now"], jobs)
    assert_views_match_ledger(cql, ledger)
    dead = cql.execute(f"SELECT reason FROM {tables.DEAD_LETTERS_TABLE}").all()
    assert len(dead) == faults["malformed"] and all(r.reason for r in dead)

    # 2. Batch job over every day, reading the Delta master dataset the archiver's
    # executors wrote: one input row per Kafka message, the views equal the ledger.
    done = _run(
        [str(VENV_BIN / "pos-batch"), "run", "--start", "2026-03-01T00:00Z",
         "--end", "2026-03-14T00:00Z", "--lookback-hours", "0"],
        jobs,
    )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = ledger_receipts(ledger)
    resends = sum(int(r["copies"]) - 1 for r in expected.values())
    assert (
        result["input_rows"],
        result["invalid_rows"],
        result["duplicates_removed"],
        result["receipts"],
        result["conflicts"],
    ) == (summary["messages"], faults["malformed"], resends, len(expected), 0)
    assert served_aggregates(cql) == expected_aggregates(ledger)
    receipts = served_receipts(cql)
    assert set(receipts) == set(expected)
    for key, r in expected.items():
        row = receipts[key]
        assert (row.item_quantity, Decimal(row.revenue), row.late) == (
            int(r["item_quantity"]),
            Decimal(r["revenue"]),
            r["late"],
        ), key

    # 3. Both applications ran on this master, with executors on the worker: the
    # master's JSON lists them as finished, and each has an executor directory under
    # the worker's work dir whose log shows tasks finished there.
    state = spark_service.master_state(cluster)
    assert state is not None
    apps = {a["name"]: a for a in state["completedapps"]}
    assert {"pos-speed-layer", "pos-batch-run"} <= set(apps), sorted(apps)
    work = spark_service.paths(cluster).work
    for name in ("pos-speed-layer", "pos-batch-run"):
        assert apps[name]["state"] == "FINISHED", apps[name]
        logs = list((work / apps[name]["id"]).glob("*/stderr"))
        assert logs, f"no executor of {name} under {work}"
        assert any("Finished task" in log.read_text(errors="replace") for log in logs), name

    # 4. Stopping leaves nothing behind: no daemon, no port.
    assert spark_service.stop(cluster)
    assert spark_service.status(cluster) == "stopped"
    env = cluster.environment()
    assert not any(port_open("127.0.0.1", int(env[f"POS_{p.upper()}"])) for p in SPARK_PORTS)
