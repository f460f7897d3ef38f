"""Streaming query listeners that receive each micro-batch's progress as parsed JSON.

PySpark (3.5) hands a Python StreamingQueryListener every progress event built from
the JVM's object field by field: the progress, its sources with their offsets and
metrics maps, the observed metrics, each a py4j round trip (some a class lookup that
searches every jar on the driver's class path). That came to ~410 round trips and
~120 ms on the listener bus's thread per event and listener, once per micro-batch, on
the cores the micro-batches need (measured: docs/speed-performance.md). Spark's own
`StreamingQueryProgress.json()` carries the same fields in one round trip, and its
parse is the dict `StreamingQuery.lastProgress` gives; Spark made the same change for
`lastProgress` and `recentProgress` (SPARK-53972).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)


class ProgressListener(StreamingQueryListener):
    """A StreamingQueryListener whose `on_progress` gets each progress as a dict (Spark's
    JSON of it: `id`, `runId`, `name`, `batchId`, `numInputRows`, `durationMs`,
    `sources` with parsed `endOffset`s and `metrics`, ...). The other events come as
    PySpark's. Register it with `spark.streams.addListener`, as any listener."""

    def on_progress(self, progress: dict[str, Any]) -> None:
        """A micro-batch's progress (the query's, or another's in the same driver)."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        # Only on PySpark's own path (not taken once registered, see `_jlistener`).
        self.on_progress(json.loads(event.progress.json))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass

    @property
    def _jlistener(self) -> Any:  # a py4j JavaObject
        """What `spark.streams.addListener` registers with the JVM (and `removeListener`
        removes): PySpark's wrapper around `_JsonProgress` instead of its own adapter."""
        from pyspark import SparkContext

        if not hasattr(self, "_json_jlistener"):
            jvm = SparkContext._jvm
            assert jvm is not None, "no active SparkContext"
            # addListener imports org.apache.spark.sql.streaming.* before it asks.
            self._json_jlistener = jvm.PythonStreamingQueryListenerWrapper(_JsonProgress(self))
        return self._json_jlistener


class _JsonProgress(JStreamingQueryListener):
    """PySpark's py4j adapter with the progress passed as its JSON text."""

    pylistener: ProgressListener

    def onQueryProgress(self, jevent: Any) -> None:  # a py4j JavaObject
        self.pylistener.on_progress(json.loads(jevent.progress().json()))


class RunCloser(ProgressListener):
    """Calls `close` when the query run `run_id` terminates.

    By run id, not query id: a query restarted from its checkpoint keeps its id, and
    Spark's listener bus delivers events asynchronously, so the previous run's
    termination can reach the listener of the next run, whose session it then closed
    mid-micro-batch ("Pool is shutdown" in the driver's writes).
    """

    def __init__(self, run_id: str, close: Callable[[], None]) -> None:
        self.run_id = run_id
        self.close = close

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.runId) == self.run_id:  # a UUID here, its text there
            self.close()
