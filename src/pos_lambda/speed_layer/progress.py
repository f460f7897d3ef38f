"""Per-micro-batch progress of the streaming jobs: logged, kept in a JSON status file,
and upserted into the `speed_progress` table (queryable with CQL and `pos-speed status`).

Spark reports rates, durations and Kafka lag through a StreamingQueryListener; the
views job adds what only it knows (valid, invalid, resends absorbed, late
receipts) through `BatchCounts`, keyed by (query, batch id) and merged here.
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pos_lambda.speed_layer.listening import ProgressListener

log = logging.getLogger("pos.speed")


@dataclass(frozen=True)
class BatchCounts:
    """What the views job learned about one micro-batch."""

    valid_rows: int = 0
    invalid_rows: int = 0
    resends_absorbed: int = 0
    conflicts: int = 0
    late_receipts: int = 0
    beyond_lateness_bound: int = 0


@dataclass(frozen=True)
class BatchProgress:
    query_name: str
    batch_id: int
    finished_at: datetime
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    duration_ms: int
    kafka_lag: int | None
    counts: BatchCounts | None = None  # only the views job has counts

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        counts = row.pop("counts")
        row.update(counts or {})
        return row

    def summary(self) -> str:
        text = (
            f"{self.query_name} batch {self.batch_id}: {self.input_rows} rows in "
            f"{self.duration_ms} ms ({self.input_rows_per_second:.0f}/s in, "
            f"{self.processed_rows_per_second:.0f}/s processed), kafka lag {self.kafka_lag}"
        )
        c = self.counts
        if c is not None:
            text += (
                f", valid {c.valid_rows}, invalid {c.invalid_rows}, resends absorbed "
                f"{c.resends_absorbed}, conflicts {c.conflicts}, late {c.late_receipts}, "
                f"beyond bound "
                f"{c.beyond_lateness_bound}"
            )
        return text


def batch_progress(
    progress: dict[str, Any],
    counts_for: Callable[[str, int], BatchCounts | None] = lambda name, batch_id: None,
) -> BatchProgress:
    """A micro-batch's progress as Spark reports it (its JSON, parsed), with the counts
    `counts_for(query name, batch id)` has for it."""
    name = progress.get("name") or progress["id"]
    batch_id = int(progress["batchId"])
    return BatchProgress(
        query_name=name,
        batch_id=batch_id,
        finished_at=datetime.now(UTC),
        input_rows=int(progress["numInputRows"]),
        # Spark leaves a rate out of its JSON when it is not a number (no time elapsed).
        input_rows_per_second=float(progress.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
        duration_ms=int(progress.get("durationMs", {}).get("triggerExecution", 0)),
        kafka_lag=kafka_lag(progress.get("sources", [])),
        counts=counts_for(name, batch_id),
    )


def kafka_lag(sources: list[dict[str, Any]]) -> int | None:
    """Largest per-partition lag the Kafka source saw (Spark reports min/avg/max)."""
    lags = []
    for source in sources:
        metrics = source.get("metrics") or {}
        if "maxOffsetsBehindLatest" in metrics:
            lags.append(int(float(metrics["maxOffsetsBehindLatest"])))
    return max(lags) if lags else None


_CAUSE = re.compile(r"(?:Caused by: |^\s*)((?:[a-z]\w*\.)+\w*(?:Exception|Error)\b.*)")
_WRAPPERS = ("py4j.", "pyspark.", "org.apache.spark.sql.streaming.StreamingQueryException")


def first_line(exc: object) -> str:
    """The gist of a query's exception: its root cause in one line.

    Spark's text nests a Python traceback, py4j wrappers and whole JVM stack traces;
    the innermost Java exception that is not a wrapper says what went wrong.
    """
    parts = (getattr(exc, "desc", None), getattr(exc, "stackTrace", None))
    text = "\n".join(str(p) for p in parts if p) or str(exc)
    causes = [
        m.group(1)
        for line in text.splitlines()
        if (m := _CAUSE.match(line)) and not m.group(1).startswith(_WRAPPERS)
    ]
    gist = causes[-1] if causes else (text.splitlines() or ["unknown error"])[0]
    return gist[:300]


def _merge_into(status_file: Path, latest: dict[str, dict[str, Any]]) -> None:
    """Replace these queries' entries of the status file, keep the others' entries.

    Each driver of `pos-speed run` (one per query in local mode) records its own
    queries; a lock file serialises the drivers' read-modify-write, and the rename is
    atomic, so readers never see half a file.
    """
    status_file.parent.mkdir(parents=True, exist_ok=True)
    with open(status_file.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        try:
            recorded = json.loads(status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            recorded = {}
        tmp = status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(recorded | latest, default=str, indent=2))
        tmp.replace(status_file)


class ProgressRecorder:
    """Collects counts from foreachBatch and progress from Spark; writes both out.

    Counts are written as soon as a batch's work is done (synchronously, inside
    foreachBatch), so a caller that saw the query finish also sees its counts;
    Spark's rates arrive a moment later through the listener and are merged in.
    """

    def __init__(self, status_file: Path, writer: Any = None) -> None:
        self._status_file = status_file
        self._writer = writer  # callable(dict) persisting a progress row, or None
        self._counts: dict[tuple[str, int], BatchCounts] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        # Per query, sums over this recorder's micro-batches (its driver's life), written
        # with every row: the speed layer's metrics read them as counters
        # (speed_layer/metrics.py), which a scrape every few micro-batches cannot add up.
        self._totals: dict[str, dict[str, int]] = {}
        self._since = datetime.now(UTC)
        self._lock = threading.Lock()

    def add_counts(self, query_name: str, batch_id: int, counts: BatchCounts) -> None:
        with self._lock:
            self._counts[(query_name, batch_id)] = counts
            self._add_to_totals(query_name, asdict(counts))
        row = {
            "query_name": query_name,
            "batch_id": batch_id,
            "finished_at": datetime.now(UTC),
            **asdict(counts),
        }
        self._publish(row)

    def record(self, progress: BatchProgress) -> None:
        log.info(progress.summary())
        with self._lock:
            self._add_to_totals(
                progress.query_name, {"micro_batches": 1, "input_rows": progress.input_rows}
            )
        self._publish(progress.as_row())

    def _add_to_totals(self, query_name: str, counts: dict[str, int]) -> None:
        """(Under the lock.) Add one micro-batch's counts to the query's totals."""
        totals = self._totals.setdefault(query_name, {})
        for name, value in counts.items():
            totals[name] = totals.get(name, 0) + int(value)

    def restarted_in_place(self, query_name: str) -> None:
        """The driver started this failed query again in its JVM (speed_layer/in_place.py):
        counted in the query's totals, for `pos_speed_query_restarts_total`. A restart in
        place is otherwise only logged, and the supervisor, which counts the drivers'
        restarts, never sees one. The status file only: a restart is no micro-batch for
        the speed_progress table."""
        with self._lock:
            self._add_to_totals(query_name, {"restarts_in_place": 1})
            last = self._latest.get(query_name, {"query_name": query_name})
            self._latest[query_name] = last | {
                "totals": dict(self._totals[query_name]),
                "totals_since": self._since,
            }
            _merge_into(self._status_file, dict(self._latest))

    def counts_for(self, query_name: str, batch_id: int) -> BatchCounts | None:
        with self._lock:
            return self._counts.pop((query_name, batch_id), None)

    def _publish(self, row: dict[str, Any]) -> None:
        with self._lock:
            totals = dict(self._totals.get(row["query_name"], {}))
            self._latest[row["query_name"]] = row | {
                "totals": totals,
                "totals_since": self._since,
            }
            snapshot = dict(self._latest)
            _merge_into(self._status_file, snapshot)
        if self._writer is not None:
            try:
                self._writer(row)
            except Exception:
                log.exception("could not persist progress of %s", row["query_name"])

    def listener(self) -> ProgressListener:
        recorder = self

        class _Listener(ProgressListener):
            def onQueryStarted(self, event: Any) -> None:
                log.info("query %s started (id %s)", event.name, event.id)

            def on_progress(self, progress: dict[str, Any]) -> None:
                recorder.record(batch_progress(progress, recorder.counts_for))

            def onQueryTerminated(self, event: Any) -> None:
                if event.exception:
                    log.error("query %s failed: %s", event.id, first_line(event.exception))
                else:
                    log.info("query %s stopped", event.id)

        return _Listener()
