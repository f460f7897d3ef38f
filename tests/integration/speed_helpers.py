"""Helpers for the speed-layer integration tests: produce with the simulator, run the
jobs, read the views back and compare them with the producer's ledger."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pos_lambda.producer.ledger import expected_aggregates as ledger_expected_aggregates
from pos_lambda.producer.ledger import load_receipts
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings

VENV_BIN = Path(sys.executable).parent


def env_for(settings: Settings) -> dict[str, str]:
    """POS_* environment that makes a subprocess use exactly these settings."""
    env = dict(os.environ) | settings.environment()
    return env


def simulate(settings: Settings, ledger: Path, *flags: str) -> dict[str, Any]:
    """Run `pos-producer simulate` into settings.topics.transactions; returns the summary."""
    cmd = [
        str(VENV_BIN / "pos-producer"), "simulate",
        "--topic", settings.topics.transactions,
        "--bootstrap-servers", settings.bootstrap_servers,
        "--ledger", str(ledger),
        "--start", "2026-03-02T08:00:00+00:00",
        *flags,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, env=env_for(settings), capture_output=True, timeout=600)
    summary: dict[str, Any] = json.loads((ledger / "summary.json").read_text())
    return summary


def run_available_now(spark: Any, settings: Settings) -> None:
    """Both speed jobs over everything in the topic now, in this process's session."""
    from pos_lambda.speed_layer import archiver_job, views_job
    from pos_lambda.speed_layer.progress import ProgressRecorder

    recorder = ProgressRecorder(settings.speed_status_file)
    queries = [
        archiver_job.start(spark, settings, available_now=True),
        views_job.start(spark, settings, recorder, available_now=True),
    ]
    for q in queries:
        q.awaitTermination()
        assert q.exception() is None, q.exception()


def pos_speed_to_end(settings: Settings) -> None:
    """`pos-speed run --available-now` as a user runs it (e.g. after a failure): exit 0."""
    done = subprocess.run(
        [str(VENV_BIN / "pos-speed"), "run", "--available-now"],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def ledger_receipts(ledger: Path) -> dict[tuple[int, int, int], dict[str, Any]]:
    return load_receipts(ledger)


def expected_aggregates(ledger: Path) -> dict[tuple[int, datetime], tuple[int, int, Decimal, int]]:
    """Ledger aggregates keyed by naive UTC window start, as the driver returns them."""
    return {
        (store, ws.replace(tzinfo=None)): v
        for (store, ws), v in ledger_expected_aggregates(ledger).items()
    }


def raw_rows(cql: Any) -> dict[tuple[int, int, int], Any]:
    rows = cql.execute(f"SELECT * FROM {tables.RAW_TABLE}").all()
    keys = Counter((r.operation_id, r.vendor_fiscal_module, r.transaction_id) for r in rows)
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, f"natural keys stored twice: {dupes[:5]}"
    return {(r.operation_id, r.vendor_fiscal_module, r.transaction_id): r for r in rows}


def speed_aggregates(cql: Any) -> dict[tuple[int, datetime], tuple[int, int, Decimal, int]]:
    rows = cql.execute(f"SELECT * FROM {tables.AGG_SPEED_TABLE}").all()
    return {
        (r.operation_id, r.window_start): (
            r.receipt_count,
            r.item_quantity,
            Decimal(r.revenue),
            r.late_count,
        )
        for r in rows
    }


def assert_views_match_ledger(cql: Any, ledger: Path) -> None:
    expected = ledger_receipts(ledger)
    stored = raw_rows(cql)
    assert set(stored) == set(expected), (
        f"missing {len(set(expected) - set(stored))}, extra {len(set(stored) - set(expected))}"
    )
    for key, r in expected.items():
        row = stored[key]
        assert (row.item_quantity, Decimal(row.revenue), row.late) == (
            int(r["item_quantity"]),
            Decimal(r["revenue"]),
            r["late"],
        ), key
    assert speed_aggregates(cql) == expected_aggregates(ledger)


def views_match_ledger(cql: Any, ledger: Path) -> bool:
    """assert_views_match_ledger as a condition to await."""
    try:
        assert_views_match_ledger(cql, ledger)
        return True
    except AssertionError:
        return False


def views_commits(settings: Settings) -> dict[int, float]:
    """The views query's committed micro-batches: id -> when the commit was written."""
    commits = settings.checkpoint_dir / "views" / "commits"
    with contextlib.suppress(FileNotFoundError):
        return {int(p.name): p.stat().st_mtime for p in commits.iterdir() if p.name.isdigit()}
    return {}


def process_gone(pid: int) -> bool:
    """`pid` has exited (reaped, or a zombie its parent has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def master_rows(spark: Any, settings: Settings) -> list[Any]:
    return (
        spark.read.format("delta")
        .load(str(settings.master_dataset_dir))
        .select("kafka_topic", "kafka_partition", "kafka_offset", "raw_value", "event_day")
        .collect()
    )


def produce_raw(
    settings: Settings,
    values: list[bytes],
    timestamps: list[int] | None = None,
    keys: list[bytes | None] | None = None,
) -> None:
    """Produce these exact records (CreateTime in ms) to settings.topics.transactions."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True})
    for i, v in enumerate(values):
        p.produce(
            settings.topics.transactions,
            value=v,
            key=keys[i] if keys else None,
            timestamp=timestamps[i] if timestamps else 0,
        )
    assert p.flush(30) == 0


def receipt_json(
    store: int,
    device: int,
    tid: int,
    at: datetime | str,
    items: list[dict[str, Any]] | None = None,
) -> bytes:
    """A valid message; `at` as a datetime or the exact text of happened_at."""
    return json.dumps(
        {
            "happened_at": at if isinstance(at, str) else at.isoformat(),
            "operation_id": store,
            "transaction_id": tid,
            "vendor_fiscal_module": device,
            "transactions": items or [{"title": "Espresso", "price": "1.90", "amount": 2}],
        }
    ).encode()


def device_key(store: int, device: int) -> bytes:
    """The producer's record key: all copies of a device's receipts share a partition."""
    return f"{store}:{device}".encode()


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def plan(ledger: Path, count: int, seed: int, stores: int = 5) -> list[Any]:
    """Simulate (with resends and malformed messages) into a ledger; return the messages
    to send, so that a test can send them in parts around a fault."""
    from datetime import UTC

    from pos_lambda.producer import ledger as ledger_files
    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig
    from pos_lambda.producer.simulation import simulate as run_simulation

    result = run_simulation(
        SimulationConfig(
            count=count,
            seed=seed,
            start=datetime(2026, 3, 2, 8, tzinfo=UTC),
            stores=stores,
            faults=FaultConfig(resend_rate=0.05, malformed_rate=0.02, late_rate=0.05,
                               late_max_delay_s=7200),
        )
    )  # fmt: skip
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    return result.messages


def send(settings: Settings, messages: list[Any]) -> None:
    from pos_lambda.producer.kafka_sink import produce

    produce(messages, settings.bootstrap_servers, settings.topics.transactions, quiet=True)
