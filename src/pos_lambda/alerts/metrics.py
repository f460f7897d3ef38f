"""The alerts processor's metrics (OpenMetrics), served by `pos-alerts run` on
POS_ALERTS_METRICS_PORT.

Read from what the processor already keeps (`Processor.totals`: records, alerts,
transactions committed and aborted, the watchdog's in-place restarts, which survive the
restart's `execv` in the environment: alerts/watchdog.py); nothing is counted twice.
After an in-place restart the process's other totals start again from zero, which
Prometheus' rate() reads as a counter reset. `families` is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

COUNTERS = {
    "commits": (
        "pos_alerts_transactions_committed",
        "Transactions committed (alerts and input offsets together; at least once: offset "
        "commits).",
    ),
    "aborts": (
        "pos_alerts_transactions_aborted",
        "Transactions aborted and rewound to the committed offsets.",
    ),
    "records": ("pos_alerts_input_records", "Input records in committed transactions."),
    "alerts": ("pos_alerts_alerts", "Alerts in committed transactions."),
    "restarts_in_place": (
        "pos_alerts_watchdog_restarts",
        "In-place restarts by the watchdog after a hung Kafka call (since the process "
        "was started from outside).",
    ),
}


def families(totals: Mapping[str, int], instance: str, mode: str, created: float) -> list[Metric]:
    out: list[Metric] = []
    for key, (name, text) in COUNTERS.items():
        family = CounterMetricFamily(name, text, labels=["instance_id", "mode"])
        family.add_metric([instance, mode], float(totals.get(key, 0)), created=created)
        out.append(family)
    in_a_row = GaugeMetricFamily(
        "pos_alerts_watchdog_restarts_in_a_row",
        "In-place restarts since the last committed transaction (the watchdog exits 6 past "
        "POS_ALERTS_MAX_RESTARTS_IN_PLACE).",
        labels=["instance_id", "mode"],
    )
    in_a_row.add_metric([instance, mode], float(totals.get("restarts_in_a_row", 0)))
    out.append(in_a_row)
    return out


class AlertsCollector(Collector):
    def __init__(
        self, totals: Callable[[], Mapping[str, int]], instance: str, mode: str, created: float
    ) -> None:
        self.totals, self.instance, self.mode, self.created = totals, instance, mode, created

    def collect(self) -> Iterator[Metric]:
        yield from families(dict(self.totals()), self.instance, self.mode, self.created)
