"""A micro-batch's progress, as Spark's JSON gives it, read into what is recorded (pure)."""

from __future__ import annotations

from pos_lambda.speed_layer.progress import BatchCounts, batch_progress

# The shape of StreamingQueryProgress.json() for a Kafka source (fields trimmed).
PROGRESS = {
    "id": "0e4bd6d4-6d43-4e8c-a0d6-1d1a1b0b1a55",
    "runId": "7f0c3c55-2f55-4a0c-9f55-0f3c3c55aa01",
    "name": "pos-speed-views",
    "batchId": 41,
    "numInputRows": 1597,
    "inputRowsPerSecond": 998.1,
    "processedRowsPerSecond": 801.5,
    "durationMs": {"addBatch": 1820, "triggerExecution": 1993},
    "sources": [
        {
            "description": "KafkaV2[Subscribe[pos.transactions]]",
            "endOffset": {"pos.transactions": {"0": 410, "1": 398}},
            "numInputRows": 1597,
            "metrics": {
                "avgOffsetsBehindLatest": "3.5",
                "maxOffsetsBehindLatest": "7",
                "minOffsetsBehindLatest": "0",
            },
        }
    ],
}


def test_the_recorded_fields_and_the_views_counts() -> None:
    counts = BatchCounts(valid_rows=1590, invalid_rows=7)
    asked: list[tuple[str, int]] = []

    def counts_for(name: str, batch_id: int) -> BatchCounts:
        asked.append((name, batch_id))
        return counts

    p = batch_progress(PROGRESS, counts_for)
    assert (p.query_name, p.batch_id, p.input_rows, p.duration_ms) == (
        "pos-speed-views",
        41,
        1597,
        1993,
    )
    assert (p.input_rows_per_second, p.processed_rows_per_second) == (998.1, 801.5)
    assert p.kafka_lag == 7
    assert p.counts == counts
    assert asked == [("pos-speed-views", 41)]


def test_an_unnamed_query_without_rates_or_kafka_metrics() -> None:
    # Spark leaves rates that are not numbers out of its JSON (no time elapsed yet).
    bare = {
        "id": "0e4bd6d4-6d43-4e8c-a0d6-1d1a1b0b1a55",
        "runId": "7f0c3c55-2f55-4a0c-9f55-0f3c3c55aa01",
        "name": None,
        "batchId": 0,
        "numInputRows": 0,
        "durationMs": {},
        "sources": [{"description": "rate", "numInputRows": 0}],
    }
    p = batch_progress(bare)
    assert p.query_name == "0e4bd6d4-6d43-4e8c-a0d6-1d1a1b0b1a55"
    assert (p.input_rows_per_second, p.processed_rows_per_second, p.duration_ms) == (0.0, 0.0, 0)
    assert p.kafka_lag is None
    assert p.counts is None
