"""The serving process's `/metrics` (OpenMetrics): the batch layer's horizon and last
run, dead letters by reason, each speed query's last recorded micro-batch, and the last
audit's verdict.

Read at each scrape from what the pipeline records: the pointer and `batch_runs`
through the serving library's `health` (one code path with `/health`), and the last
audit's record, `$POS_STATE_DIR/audit/last.json`, which `pos-audit` writes
(src/pos_lambda/audit/cli.py). `families` is pure (unit-tested with literal inputs);
`ServingCollector` is the shell.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.serving.model import Health

log = logging.getLogger("pos.metrics")

RUN_STATUSES = ("running", "written", "committed", "conflict", "failed", "unknown")


def families(health: Health | None, audit: Mapping[str, Any] | None) -> list[Metric]:
    """The metric families of one scrape. `health`: None when Cassandra did not answer;
    `audit`: the last audit's record, None when none ran."""
    up = GaugeMetricFamily(
        "pos_serving_cassandra_up", "1 if this scrape could read the pipeline's state."
    )
    up.add_metric([], 0.0 if health is None else 1.0)
    out: list[Metric] = [up]
    if health is not None:
        out += _batch(health) + _dead_letters(health)
    out += _audit(audit)
    return out


def _batch(health: Health) -> list[Metric]:
    out: list[Metric] = []
    if health.horizon is not None:
        horizon = GaugeMetricFamily(
            "pos_batch_horizon_timestamp_seconds",
            "The batch views are final up to this instant (Unix time).",
        )
        horizon.add_metric([], health.horizon.timestamp())
        age = GaugeMetricFamily(
            "pos_batch_horizon_age_seconds",
            "How far the clock has moved past the batch horizon: one hour plus a run's "
            "time when the hourly runs keep up.",
        )
        age.add_metric([], float(health.horizon_age_seconds or 0.0))
        out += [horizon, age]
    last: BatchRun | None = health.batch_runs[0] if health.batch_runs else None
    if last is None:
        return out
    status = GaugeMetricFamily(
        "pos_batch_last_run_status",
        "1 for the status of the newest batch run (batch_runs), 0 for the others.",
        labels=["status"],
    )
    for s in RUN_STATUSES:
        status.add_metric([s], 1.0 if last.status == s else 0.0)
    out.append(status)
    if last.started_at is not None:
        started = GaugeMetricFamily(
            "pos_batch_last_run_start_timestamp_seconds",
            "When the newest batch run started (Unix time).",
        )
        started.add_metric([], last.started_at.timestamp())
        out.append(started)
    if last.started_at is not None and last.finished_at is not None:
        took = GaugeMetricFamily(
            "pos_batch_last_run_duration_seconds", "How long the newest finished batch run took."
        )
        took.add_metric([], (last.finished_at - last.started_at).total_seconds())
        out.append(took)
    return out


def _dead_letters(health: Health) -> list[Metric]:
    rows = GaugeMetricFamily(
        "pos_dead_letters",
        "Rows in the dead_letters table by reason code (a scan of at most "
        "POS_SERVE_DEAD_LETTER_SCAN_LIMIT rows); its rate of change is the dead-letter rate.",
        labels=["reason"],
    )
    for reason, n in sorted(health.dead_letters.by_reason.items()):
        rows.add_metric([reason], float(n))
    cut = GaugeMetricFamily(
        "pos_dead_letters_scan_truncated", "1 if the scan stopped at its limit (counts are low)."
    )
    cut.add_metric([], 1.0 if health.dead_letters.truncated else 0.0)
    return [rows, cut]


def _audit(audit: Mapping[str, Any] | None) -> list[Metric]:
    if not audit:
        return []
    clean = GaugeMetricFamily(
        "pos_audit_last_clean",
        "1 if the last pos-audit found every exact view equal to its ledger, 0 if not.",
    )
    clean.add_metric([], 1.0 if audit.get("clean") else 0.0)
    out: list[Metric] = [clean]
    if audit.get("finished_at"):
        at = GaugeMetricFamily(
            "pos_audit_last_timestamp_seconds", "When the last pos-audit finished (Unix time)."
        )
        at.add_metric([], datetime.fromisoformat(str(audit["finished_at"])).timestamp())
        out.append(at)
    rows = GaugeMetricFamily(
        "pos_audit_last_rows",
        "The last audit's rows lost, duplicated and wrong, by view.",
        labels=["view", "kind"],
    )
    for view, result in sorted((audit.get("views") or {}).items()):
        for kind in ("lost", "duplicated", "wrong"):
            rows.add_metric([view, kind], float(result.get(kind) or 0))
    out.append(rows)
    return out


def read_audit(path: Path) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return found


class ServingCollector(Collector):
    def __init__(self, serving: Any, audit_file: Path) -> None:
        self.serving = serving
        self.audit_file = audit_file

    def collect(self) -> Iterator[Metric]:
        try:
            health = self.serving.health(1)
        except Exception as exc:  # Cassandra away: say so in a series, not a 500
            log.warning("metrics: no pipeline state: %s", exc)
            health = None
        yield from families(health, read_audit(self.audit_file))
