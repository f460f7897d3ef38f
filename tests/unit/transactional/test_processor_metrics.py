"""The alerts processor's metrics from its literal totals (pure)."""

from __future__ import annotations

from prometheus_client.openmetrics.exposition import generate_latest

from pos_lambda.adapters.metrics_http import registry_of
from pos_lambda.transactional.metrics import AlertsCollector


def test_the_processors_totals_as_counters_of_its_instance() -> None:
    totals = {"records": 500, "alerts": 7, "commits": 12, "aborts": 1,
              "restarts_in_place": 2, "restarts_in_a_row": 0}  # fmt: skip
    text = generate_latest(
        registry_of(AlertsCollector(lambda: totals, "1", "exactly_once", 1772438400.0))
    ).decode()
    lines = [x for x in text.splitlines() if not x.startswith("#")]
    labels = '{instance_id="1",mode="exactly_once"}'
    for expected in [
        f"pos_alerts_transactions_committed_total{labels} 12.0",
        f"pos_alerts_transactions_aborted_total{labels} 1.0",
        f"pos_alerts_input_records_total{labels} 500.0",
        f"pos_alerts_alerts_total{labels} 7.0",
        f"pos_alerts_watchdog_restarts_total{labels} 2.0",
        f"pos_alerts_watchdog_restarts_in_a_row{labels} 0.0",
        f"pos_alerts_transactions_committed_created{labels} 1.7724384e+09",
    ]:
        assert expected in lines, expected
    assert text.endswith("# EOF\n")  # OpenMetrics
