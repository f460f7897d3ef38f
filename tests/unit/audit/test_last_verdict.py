"""pos-audit records its verdict where the serving process's /metrics reads it: the
writer (audit/cli.py) and the reader (serving/metrics.py) agree, on a literal report."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.openmetrics.exposition import generate_latest

from pos_lambda.adapters.metrics_http import registry_of
from pos_lambda.audit.cli import _record_last
from pos_lambda.audit.compare import Tally
from pos_lambda.audit.report import AuditReport, ViewResult
from pos_lambda.serving.metrics import families, read_audit


class _Fixed:
    def __init__(self, metrics: list) -> None:  # type: ignore[type-arg]
        self.metrics = metrics

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.metrics)


def test_a_failed_audit_shows_as_not_clean_with_its_rows(tmp_path: Path) -> None:
    report = AuditReport(
        ledger="/l",
        keyspace="k",
        topic="t",
        views=[
            ViewResult(
                "speed_raw", exact=True, tally=Tally(expected=10, observed=11, duplicated=1)
            ),
            ViewResult("batch_raw", exact=True, tally=Tally(expected=10, observed=10)),
        ],
    )
    last = tmp_path / "audit" / "last.json"
    _record_last(last, report)
    recorded = json.loads(last.read_text())
    assert (recorded["clean"], recorded["exit_code"], recorded["keyspace"]) == (False, 1, "k")
    text = generate_latest(registry_of(_Fixed(families(None, read_audit(last))))).decode()
    lines = text.splitlines()
    assert "pos_audit_last_clean 0.0" in lines
    assert 'pos_audit_last_rows{kind="duplicated",view="speed_raw"} 1.0' in lines
    assert 'pos_audit_last_rows{kind="lost",view="batch_raw"} 0.0' in lines
    assert read_audit(tmp_path / "none.json") is None
