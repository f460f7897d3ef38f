"""The speed layer's metrics from literal status rows, checkpoints and offsets (pure)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.openmetrics.exposition import generate_latest

from pos_lambda.adapters.metrics_http import registry_of
from pos_lambda.speed_layer.metrics import DriverState, committed_offsets, families, lag


class _Fixed:
    def __init__(self, metrics: list) -> None:  # type: ignore[type-arg]
        self.metrics = metrics

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.metrics)


def _exposition(metrics: list) -> list[str]:  # type: ignore[type-arg]
    text = generate_latest(registry_of(_Fixed(metrics))).decode()
    return [line for line in text.splitlines() if not line.startswith("#")]


STATUS = {
    "pos-speed-views": {
        "query_name": "pos-speed-views",
        "batch_id": 41,
        "finished_at": "2026-03-02 08:00:10+00:00",
        "duration_ms": 850,
        "totals": {"micro_batches": 40, "input_rows": 1000, "valid_rows": 990,
                   "invalid_rows": 10, "resends_absorbed": 6, "conflicts": 2,
                   "late_receipts": 20, "beyond_lateness_bound": 1, "restarts_in_place": 2},
        "totals_since": "2026-03-02 07:00:00+00:00",
    },
    "pos-speed-archiver": {
        "query_name": "pos-speed-archiver",
        "batch_id": 3,
        "finished_at": "2026-03-02 08:00:00+00:00",
        "duration_ms": 12000,
        "totals": {"micro_batches": 3, "input_rows": 1000},
        "totals_since": "2026-03-02 07:00:00+00:00",
    },
}  # fmt: skip


def test_the_exposition_of_a_known_state() -> None:
    drivers = [
        DriverState(("pos-speed-archiver",), up=False, restarts=2),
        DriverState(("pos-speed-views",), up=True, restarts=0, standby_up=True),
    ]
    lines = _exposition(
        families(STATUS, drivers, {"pos-speed-views": 0, "pos-speed-archiver": 250}, "t")
    )
    for expected in [
        'pos_speed_driver_up{query="pos-speed-archiver"} 0.0',
        'pos_speed_driver_up{query="pos-speed-views"} 1.0',
        'pos_speed_driver_restarts_total{query="pos-speed-archiver"} 2.0',
        'pos_speed_standby_up{query="pos-speed-archiver"} 0.0',
        'pos_speed_standby_up{query="pos-speed-views"} 1.0',
        "pos_speed_kafka_up 1.0",
        'pos_speed_kafka_lag_records{query="pos-speed-archiver",topic="t"} 250.0',
        'pos_speed_kafka_lag_records{query="pos-speed-views",topic="t"} 0.0',
        'pos_speed_micro_batch_duration_seconds{query="pos-speed-archiver"} 12.0',
        'pos_speed_micro_batch_duration_seconds{query="pos-speed-views"} 0.85',
        'pos_speed_last_micro_batch_timestamp_seconds{query="pos-speed-views"} 1.77243841e+09',
        'pos_speed_micro_batch_id{query="pos-speed-views"} 41.0',
        'pos_speed_micro_batches_total{query="pos-speed-views"} 40.0',
        'pos_speed_input_records_total{query="pos-speed-archiver"} 1000.0',
        'pos_speed_receipts_total{query="pos-speed-views"} 990.0',
        'pos_speed_dead_letters_total{query="pos-speed-views"} 10.0',
        'pos_speed_resends_absorbed_total{query="pos-speed-views"} 6.0',
        'pos_speed_conflicts_total{query="pos-speed-views"} 2.0',
        'pos_speed_late_receipts_total{query="pos-speed-views"} 20.0',
        'pos_speed_beyond_lateness_bound_total{query="pos-speed-views"} 1.0',
        'pos_speed_receipts_created{query="pos-speed-views"} 1.7724348e+09',
        # Restarted in place by its driver twice; the archiver's driver never did.
        'pos_speed_query_restarts_total{query="pos-speed-views"} 2.0',
        'pos_speed_query_restarts_total{query="pos-speed-archiver"} 0.0',
        'pos_speed_query_restarts_created{query="pos-speed-views"} 1.7724348e+09',
    ]:
        assert expected in lines, expected
    # The archiver has no views counts: no series rather than a made-up zero.
    assert not [x for x in lines if x.startswith('pos_speed_receipts_total{query="pos-speed-a')]


def test_without_kafka_the_lag_is_absent_and_says_why() -> None:
    lines = _exposition(families({}, [], None, "t"))
    assert "pos_speed_kafka_up 0.0" in lines
    assert not [x for x in lines if x.startswith("pos_speed_kafka_lag_records")]


def test_lag_is_up_to_the_last_stable_offset_from_the_last_committed_batch(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "views"
    assert committed_offsets(checkpoint) is None
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1772438400000,"conf":{}}'
    for batch, ends in ((4, '{"t":{"0":10,"1":7}}'), (5, '{"t":{"0":15,"1":9}}')):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{ends}")
    (checkpoint / "commits" / "4").write_text('v1\n{"nextBatchWatermarkMs":0}')
    # Batch 5 is logged but not committed: the query has read up to batch 4's ends.
    assert committed_offsets(checkpoint) == {"t": {"0": 10, "1": 7}}
    assert lag({0: 12, 1: 7, 2: 3}, committed_offsets(checkpoint)["t"]) == 2 + 0 + 3  # type: ignore[index]
    assert lag({0: 12}, None) == 12
