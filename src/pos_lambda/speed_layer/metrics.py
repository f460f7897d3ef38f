"""The speed layer's metrics (OpenMetrics), served by `pos-speed run`'s supervisor on
POS_SPEED_METRICS_PORT.

Nothing is counted twice here: each scrape reads what the drivers already record
(`speed_status.json`: each query's last micro-batch and its driver's running totals,
src/pos_lambda/speed_layer/progress.py), each query's checkpoint (the Kafka offsets its
last committed micro-batch read up to), Kafka's last stable offsets, and the supervisor's
view of its drivers.

Kafka lag is read-committed aware: the queries read with `isolation.level=
read_committed`, so they can never read past the last stable offset (LSO); records of a
transaction still open sit between the LSO and the high watermark, and counting them
would show lag the queries cannot work off. The lag is the LSO (asked with
`IsolationLevel.READ_COMMITTED`) minus the checkpoint's offset, per partition, summed.

`families` is pure (unit-tested with literal inputs); `SpeedCollector` is the shell.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pos_lambda.adapters.kafka_clients import KafkaAdmin
from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings
from pos_lambda.speed_layer.batch_plan import logged_offsets

log = logging.getLogger("pos.metrics")

# The views job's counts (progress.BatchCounts) -> metric name and help.
VIEWS_COUNTERS = {
    "valid_rows": ("pos_speed_receipts", "Valid receipt copies the views query processed."),
    "invalid_rows": (
        "pos_speed_dead_letters",
        "Records the views query refused (written to dead_letters with their reason).",
    ),
    "resends_absorbed": (
        "pos_speed_resends_absorbed",
        "Copies of an already counted receipt with the same content (not counted again).",
    ),
    "conflicts": (
        "pos_speed_conflicts",
        "Copies of a counted receipt with other content (kept in conflicts).",
    ),
    "late_receipts": (
        "pos_speed_late_receipts",
        "Receipts that reached Kafka more than 15 minutes after they happened.",
    ),
    "beyond_lateness_bound": (
        "pos_speed_beyond_lateness_bound",
        "Receipts later than POS_SPEED_MAX_LATENESS_HOURS: left to the batch layer.",
    ),
}


@dataclass(frozen=True)
class DriverState:
    """What the supervisor knows of one driver (a Spark application)."""

    queries: tuple[str, ...]
    up: bool  # its process runs and has said it is ready
    restarts: int  # times the supervisor started it again (or its standby took over)
    standby_up: bool = False  # a standby waits beside it, ready to take over


def committed_offsets(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    """The Kafka offsets (topic -> partition -> offset) up to which the query's last
    committed micro-batch read: `offsets/N` of the newest N in `commits/` (a batch whose
    offsets are logged but not committed is still running, or will be replayed). None
    before the first commit."""
    commits = checkpoint / "commits"
    try:
        done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    if not done:
        return None
    try:
        return logged_offsets((checkpoint / "offsets" / str(max(done))).read_text(errors="replace"))
    except OSError:
        return None


def lag(last_stable: Mapping[int, int], committed: Mapping[str, int] | None) -> int:
    """Records a read-committed reader at `committed` (partition as text -> offset, as
    Spark logs it) has still to read, up to each partition's last stable offset."""
    at = committed or {}
    return sum(max(0, end - at.get(str(p), 0)) for p, end in last_stable.items())


def families(
    status: Mapping[str, Any],
    drivers: list[DriverState],
    lags: Mapping[str, int] | None,
    topic: str,
) -> list[Metric]:
    """The metric families of one scrape. `status`: speed_status.json (query -> its last
    row); `lags`: query -> records behind (None: Kafka did not answer)."""
    up = GaugeMetricFamily(
        "pos_speed_driver_up",
        "1 while the driver running this query is up (its process runs and is ready).",
        labels=["query"],
    )
    restarts = CounterMetricFamily(
        "pos_speed_driver_restarts",
        "Times the supervisor started this query's driver again after a failure (or its "
        "standby took over).",
        labels=["query"],
    )
    standby = GaugeMetricFamily(
        "pos_speed_standby_up",
        "1 while a standby driver stands by to take this query over (POS_SPEED_STANDBY).",
        labels=["query"],
    )
    for d in drivers:
        for q in d.queries:
            up.add_metric([q], 1.0 if d.up else 0.0)
            restarts.add_metric([q], float(d.restarts))
            standby.add_metric([q], 1.0 if d.standby_up else 0.0)
    out: list[Metric] = [up, restarts, standby]

    kafka_up = GaugeMetricFamily(
        "pos_speed_kafka_up", "1 if Kafka answered this scrape's last-stable-offset query."
    )
    kafka_up.add_metric([], 0.0 if lags is None else 1.0)
    out.append(kafka_up)
    if lags is not None:
        behind = GaugeMetricFamily(
            "pos_speed_kafka_lag_records",
            "Records in the input topic up to its last stable offset (read_committed) that "
            "the query's last committed micro-batch has not read.",
            labels=["query", "topic"],
        )
        for q, n in sorted(lags.items()):
            behind.add_metric([q, topic], float(n))
        out.append(behind)

    duration = GaugeMetricFamily(
        "pos_speed_micro_batch_duration_seconds",
        "Duration of the query's last micro-batch (Spark's triggerExecution).",
        labels=["query"],
    )
    finished = GaugeMetricFamily(
        "pos_speed_last_micro_batch_timestamp_seconds",
        "When the query's last micro-batch finished (Unix time).",
        labels=["query"],
    )
    batch_id = GaugeMetricFamily(
        "pos_speed_micro_batch_id", "The id of the query's last micro-batch.", labels=["query"]
    )
    batches = CounterMetricFamily(
        "pos_speed_micro_batches",
        "Micro-batches the query's current driver has run.",
        labels=["query"],
    )
    inputs = CounterMetricFamily(
        "pos_speed_input_records",
        "Kafka records the query's current driver has read.",
        labels=["query"],
    )
    # The driver's own restarts of a failed query (same JVM, speed_layer/in_place.py):
    # pos_speed_driver_restarts_total counts only what the supervisor sees, a driver
    # that died, so a query that keeps failing and recovering in place would show nowhere.
    in_place = CounterMetricFamily(
        "pos_speed_query_restarts",
        "Times the query failed and its current driver started it again in place, from "
        "its checkpoint, once Cassandra and Kafka answered (POS_SPEED_QUERY_RESTARTS_IN_PLACE).",
        labels=["query"],
    )
    views = {
        name: CounterMetricFamily(metric, text, labels=["query"])
        for name, (metric, text) in VIEWS_COUNTERS.items()
    }
    for q, row in sorted(status.items()):
        if not isinstance(row, Mapping):
            continue
        if row.get("duration_ms") is not None:
            duration.add_metric([q], int(row["duration_ms"]) / 1000)
        if row.get("finished_at"):
            finished.add_metric([q], _unix(row["finished_at"]))
        if row.get("batch_id") is not None:
            batch_id.add_metric([q], float(row["batch_id"]))
        totals = row.get("totals") or {}
        created = _unix(row["totals_since"]) if row.get("totals_since") else None
        for family, name in ((batches, "micro_batches"), (inputs, "input_rows")):
            if name in totals:
                family.add_metric([q], float(totals[name]), created=created)
        for name, family in views.items():
            if name in totals:
                family.add_metric([q], float(totals[name]), created=created)
        if "totals" in row:  # zero until the first restart: a series to alert on
            restarted = float(totals.get("restarts_in_place", 0))
            in_place.add_metric([q], restarted, created=created)
    out += [duration, finished, batch_id, batches, inputs, in_place, *views.values()]
    return out


def _unix(text: str) -> float:
    return datetime.fromisoformat(str(text)).timestamp()


class SpeedCollector(Collector):
    """Reads the status file, the checkpoints and Kafka at each scrape."""

    def __init__(self, settings: Settings, drivers: Callable[[], list[DriverState]]) -> None:
        self.settings = settings
        self.drivers = drivers
        self._admin: KafkaAdmin | None = None

    def collect(self) -> Iterator[Metric]:
        try:
            status = json.loads(self.settings.speed_status_file.read_text())
        except (OSError, json.JSONDecodeError):
            status = {}
        yield from families(status, self.drivers(), self._lags(), self.settings.topics.transactions)

    def _lags(self) -> dict[str, int] | None:
        topic = self.settings.topics.transactions
        try:
            ends = self._last_stable_offsets(topic)
        except Exception as exc:  # Kafka away: say so in pos_speed_kafka_up, not a 500
            log.warning("metrics: no last stable offsets of %s: %s", topic, exc)
            return None
        return {
            query: lag(
                ends,
                (committed_offsets(self.settings.checkpoint_dir / job) or {}).get(topic),
            )
            for job, query in SPEED_QUERY_OF_JOB.items()
        }

    def _last_stable_offsets(self, topic: str) -> dict[int, int]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # public, not in its __all__

        from pos_lambda.adapters.kafka_clients import ConfluentClients

        admin = self._admin
        if admin is None:
            admin = self._admin = ConfluentClients.from_settings(self.settings).admin()
        metadata = admin.list_topics(topic, timeout=5).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(str(metadata.error))
        latest: Any = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(topic, p): latest for p in metadata.partitions}
        answers = admin.list_offsets(
            asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5
        )
        return {tp.partition: int(f.result(timeout=10).offset) for tp, f in answers.items()}
