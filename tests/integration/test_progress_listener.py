"""A ProgressListener gets every micro-batch's progress from real Spark and Kafka, as
Spark's JSON parsed: what the status file, `speed_progress` and the archiver's offset
commits are built from."""

from __future__ import annotations

from typing import Any

from pos_lambda.adapters.service import wait_for
from pos_lambda.settings import Settings
from pos_lambda.speed_layer.listening import ProgressListener
from pos_lambda.speed_layer.progress import batch_progress
from tests.integration.speed_helpers import produce_raw


class Collect(ProgressListener):
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.seen.append(progress)


def mine(listener: Collect, query: Any) -> list[dict[str, Any]]:
    """The progress of this run of the query (the session runs others' too)."""
    return [p for p in listener.seen if p["runId"] == query.runId]


def test_each_micro_batch_reaches_the_listener_with_its_offsets_and_lag(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Any
) -> None:
    from pos_lambda.adapters import kafka

    settings, _ = isolated
    settings = settings.with_overrides(**{"speed_max_offsets_per_trigger": 20})
    produce_raw(settings, [b"%d" % i for i in range(30)], keys=[b"%d" % (i % 4) for i in range(30)])
    listener = Collect()
    spark.streams.addListener(listener)
    try:
        query = (
            kafka.read_transactions(spark, settings)
            .writeStream.format("noop")
            .queryName("progress_listener_test")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None, query.exception()
        # The listener bus delivers asynchronously: await both micro-batches (20 + 10).
        assert wait_for(lambda: sum(p["numInputRows"] for p in mine(listener, query)) == 30, 30)
    finally:
        spark.streams.removeListener(listener)

    first, *_, last = sorted(mine(listener, query), key=lambda p: p["batchId"])
    assert (first["batchId"], first["numInputRows"], first["name"]) == (
        0,
        20,
        "progress_listener_test",
    )
    ends = last["sources"][0]["endOffset"][settings.topics.transactions]
    assert sum(ends.values()) == 30  # every partition read to the log's end
    recorded = batch_progress(last)
    assert (recorded.query_name, recorded.batch_id, recorded.input_rows) == (
        "progress_listener_test",
        last["batchId"],
        10,
    )
    assert recorded.kafka_lag == 0
    assert recorded.duration_ms > 0
