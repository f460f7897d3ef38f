"""A real Prometheus (Debian's package, a local process with its own data dir and the
shipped alert rules) scrapes the running layers: `pos-speed run`, `pos-alerts run` and
`pos-serve http`, over real Kafka, Cassandra and Spark.

After a known stream (literal records: valid receipts, exact resends, malformed
values), the series hold the values the stream implies; then the speed layer is
stopped, and the shipped rule PosSpeedLayerDown fires. Every wait awaits a condition
through Prometheus' HTTP API.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import prometheus_service
from tests.integration.alerts_helpers import alerts_settings, cleanup, start_processor
from tests.integration.speed_helpers import (
    VENV_BIN,
    device_key,
    env_for,
    ms,
    produce_raw,
    receipt_json,
)

pytestmark = pytest.mark.integration

STORE = 9
AT = datetime(2026, 3, 2, 8, 10, tzinfo=UTC)  # the receipts happened from 08:10:01
HOUR = ("2026-03-02T08:00:00+00:00", "2026-03-02T09:00:00+00:00")  # the batch run's
VALID = 20  # receipts 1..20 of device 1
RESENT = 3  # receipts 1..3 sent twice, byte for byte
MALFORMED = 4  # values that are not JSON


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=10
    ) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _value(url: str, promql: str) -> float | None:
    """The value of a query with one series (None: no series yet)."""
    result = _query(url, promql)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _firing(url: str, name: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=10) as answer:
        alerts = json.loads(answer.read())["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def _start(argv: list[str], settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115 - the child keeps it; closed with the tmp dir
    return subprocess.Popen(
        argv, env=env_for(settings), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def _await_values(url: str, expected: dict[str, float], timeout: float) -> None:
    """Until each query has its expected value; fails naming what differs."""

    def seen() -> dict[str, float | None]:
        return {q: _value(url, q) for q in expected}

    assert wait_for(lambda: seen() == expected, timeout=timeout, interval=1), seen()


def test_prometheus_scrapes_the_layers_and_fires_when_the_speed_layer_stops(
    isolated: tuple[Settings, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    prometheus_service.ensure_installed()
    base, _ = isolated
    speed_port, alerts_port, serve_port, prom_port = (_free_port() for _ in range(4))
    settings = alerts_settings(
        base,
        new_topic,
        speed_metrics_port=speed_port,
        alerts_metrics_port=alerts_port,
        serve_port=serve_port,
        speed_warm_up=False,  # the stream is small; the scrape, not latency, is tested
        speed_trigger_seconds=1.0,
        speed_archive_trigger_seconds=1.0,
    )
    valid = [receipt_json(STORE, 1, tid, AT + timedelta(seconds=tid)) for tid in range(1, 21)]
    values = valid + valid[:RESENT] + [b"{not json %d" % i for i in range(MALFORMED)]
    produce_raw(
        settings,
        values,
        timestamps=[ms(AT + timedelta(seconds=30))] * len(values),
        keys=[device_key(STORE, 1)] * len(values),
    )

    config = tmp_path / "prometheus.yml"
    config.write_text(
        prometheus_service.config(
            {
                "pos-speed": f"127.0.0.1:{speed_port}",
                "pos-alerts": f"127.0.0.1:{alerts_port}",
                "pos-serving": f"127.0.0.1:{serve_port}",
            },
            scrape_s=1,
            evaluate_s=1,
        )
    )
    speed = _start([str(VENV_BIN / "pos-speed"), "run"], settings, tmp_path / "speed.log")
    alerts = start_processor(settings, tmp_path / "alerts.log")
    serve = _start([str(VENV_BIN / "pos-serve"), "http"], settings, tmp_path / "serve.log")
    try:
        with prometheus_service.running(
            config, tmp_path / "tsdb", prom_port, tmp_path / "prometheus.log"
        ) as url:
            views = '{query="pos-speed-views"}'
            total = VALID + RESENT + MALFORMED
            _await_values(
                url,
                {
                    f"pos_speed_input_records_total{views}": total,
                    f"pos_speed_receipts_total{views}": VALID + RESENT,
                    f"pos_speed_resends_absorbed_total{views}": RESENT,
                    f"pos_speed_dead_letters_total{views}": MALFORMED,
                    f"pos_speed_conflicts_total{views}": 0,
                    f"pos_speed_late_receipts_total{views}": 0,
                    'pos_speed_input_records_total{query="pos-speed-archiver"}': total,
                    'sum(pos_speed_kafka_lag_records{query=~"pos-speed-.*"})': 0,
                    "min(pos_speed_driver_up)": 1,
                    "sum(pos_speed_driver_restarts_total)": 0,
                    # Exported (at 0) for each query before any restart in place.
                    'pos_speed_query_restarts_total{query="pos-speed-views"}': 0,
                    'pos_speed_query_restarts_total{query="pos-speed-archiver"}': 0,
                    'pos_dead_letters{reason="invalid_json"}': MALFORMED,
                    "pos_serving_cassandra_up": 1,
                    "pos_alerts_input_records_total": total,
                    "pos_alerts_transactions_aborted_total": 0,
                    "pos_alerts_watchdog_restarts_total": 0,
                },
                timeout=420,
            )
            assert (_value(url, "pos_alerts_transactions_committed_total") or 0) >= 1
            assert (_value(url, f"pos_speed_micro_batch_duration_seconds{views}") or 0) > 0
            assert _firing(url, "PosSpeedLayerDown") == []

            # A batch run over the hour (everything is archived by now): the serving
            # process's batch series follow its batch_runs row and pointer.
            batch = subprocess.run(
                [str(VENV_BIN / "pos-batch"), "run", "--start", HOUR[0], "--end", HOUR[1]],
                env=env_for(settings), capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert batch.returncode == 0, batch.stderr[-3000:]
            assert json.loads(batch.stdout.splitlines()[-1])["receipts"] == VALID
            _await_values(
                url,
                {
                    'pos_batch_last_run_status{status="committed"}': 1,
                    "pos_batch_horizon_timestamp_seconds": 1772442000,  # 2026-03-02T09:00Z
                },
                timeout=60,
            )
            took = _value(url, "pos_batch_last_run_duration_seconds")
            assert took is not None and 0 < took < 600

            speed.send_signal(signal.SIGTERM)
            assert speed.wait(timeout=120) == 0
            # `for: 1m` after the first failed scrape, evaluated every second.
            assert wait_for(lambda: _value(url, 'up{job="pos-speed"}') == 0, 30, 0.5)
            assert wait_for(lambda: bool(_firing(url, "PosSpeedLayerDown")), 120, 1)
            (fired,) = _firing(url, "PosSpeedLayerDown")
            assert fired["labels"]["severity"] == "critical"
            assert fired["labels"]["instance"] == f"127.0.0.1:{speed_port}"
            assert _firing(url, "PosAlertsProcessorDown") == []
    finally:
        cleanup(speed, alerts, serve)
