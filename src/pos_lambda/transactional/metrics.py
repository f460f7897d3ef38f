"""A transactional processor's metrics (OpenMetrics), served by `pos-alerts run` on
POS_ALERTS_METRICS_PORT (`pos_alerts_*`) and `pos-receipts run` on POS_RECEIPTS_METRICS_PORT
(`pos_receipts_*`).

Read from what the processor already keeps (`Processor.totals`: records, outputs,
transactions committed and aborted, the watchdog's in-place restarts, which survive the
restart's `execv` in the environment: transactional/watchdog.py); nothing is counted twice.
After an in-place restart the process's other totals start again from zero, which
Prometheus' rate() reads as a counter reset. `families` is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

COUNTERS = {
    "commits": (
        "transactions_committed",
        "Transactions committed (outputs and input offsets together; at least once: offset "
        "commits).",
    ),
    "aborts": (
        "transactions_aborted",
        "Transactions aborted and rewound to the committed offsets.",
    ),
    "records": ("input_records", "Input records in committed transactions."),
    "dead_letters": (
        "dead_letters",
        "Input records whose outputs the broker refused for good, dead-lettered instead "
        "(transactional/refused.py).",
    ),
    "restarts_in_place": (
        "watchdog_restarts",
        "In-place restarts by the watchdog after a hung Kafka call (since the process "
        "was started from outside).",
    ),
}


def families(
    totals: Mapping[str, int],
    instance: str,
    mode: str,
    created: float,
    name: str = "alerts",
    outputs: str = "Alerts in committed transactions.",
) -> list[Metric]:
    """`pos_<name>_*` families; `totals[name]` counts the outputs, described by `outputs`."""
    counters = {**COUNTERS, name: (name, outputs)}
    out: list[Metric] = []
    for key, (metric, text) in counters.items():
        family = CounterMetricFamily(f"pos_{name}_{metric}", text, labels=["instance_id", "mode"])
        family.add_metric([instance, mode], float(totals.get(key, 0)), created=created)
        out.append(family)
    in_a_row = GaugeMetricFamily(
        f"pos_{name}_watchdog_restarts_in_a_row",
        "In-place restarts since the last committed transaction (the watchdog exits 6 past "
        "POS_<NAME>_MAX_RESTARTS_IN_PLACE).",
        labels=["instance_id", "mode"],
    )
    in_a_row.add_metric([instance, mode], float(totals.get("restarts_in_a_row", 0)))
    out.append(in_a_row)
    return out


class ProcessorCollector(Collector):
    def __init__(
        self,
        totals: Callable[[], Mapping[str, int]],
        instance: str,
        mode: str,
        created: float,
        name: str = "alerts",
        outputs: str = "Alerts in committed transactions.",
    ) -> None:
        self.totals, self.instance, self.mode, self.created = totals, instance, mode, created
        self.name, self.outputs = name, outputs

    def collect(self) -> Iterator[Metric]:
        yield from families(
            dict(self.totals()), self.instance, self.mode, self.created, self.name, self.outputs
        )


AlertsCollector = ProcessorCollector  # the alerts' names are the defaults
