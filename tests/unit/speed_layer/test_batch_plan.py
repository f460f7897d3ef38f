"""A views micro-batch's paths, decided from plain counts: each threshold on both sides."""

from __future__ import annotations

import pytest

from pos_lambda.speed_layer.batch_plan import Modes, Reads, Route, Thresholds, modes, route
from pos_lambda.speed_layer.progress import BatchCounts

LIMITS = Thresholds(
    driver_reads_below=100, driver_writes_below=50, bucket_reads_from=10.0, native_check_from=400
)
OFF = Thresholds(
    driver_reads_below=0, driver_writes_below=0, bucket_reads_from=10.0, native_check_from=400
)


@pytest.mark.parametrize(
    ("valid", "collected", "reads"),
    [
        (99, True, Reads.DRIVER),  # one below the threshold
        (100, True, Reads.BY_RECEIPT),  # at it: the connector (100 receipts in 20 buckets)
        (99, False, Reads.BY_RECEIPT),  # keys not collected: the driver has none to read
    ],
)
def test_the_driver_reads_a_small_micro_batch_whose_keys_it_collected(
    valid: int, collected: bool, reads: Reads
) -> None:
    assert route(BatchCounts(valid, 0), 20, collected, LIMITS).reads is reads


@pytest.mark.parametrize(
    ("valid", "buckets", "reads"),
    [
        (199, 20, Reads.BY_RECEIPT),  # 9.95 receipts per key bucket
        (200, 20, Reads.BY_PARTITION),  # 10: a backlog, whole partitions
        (10, 0, Reads.BY_PARTITION),  # no bucket estimate: counted as one
    ],
)
def test_the_connector_reads_whole_partitions_from_so_many_receipts_per_bucket(
    valid: int, buckets: int, reads: Reads
) -> None:
    assert route(BatchCounts(valid, 0), buckets, False, LIMITS).reads is reads


@pytest.mark.parametrize(
    ("valid", "invalid", "driver_writes"),
    [
        (40, 9, True),  # 49 Kafka records: one below the threshold
        (40, 10, False),  # 50: the connector
        (0, 49, True),  # dead letters count as records too
    ],
)
def test_the_driver_writes_a_micro_batch_of_fewer_records_than_the_threshold(
    valid: int, invalid: int, driver_writes: bool
) -> None:
    assert route(BatchCounts(valid, invalid), 1, True, LIMITS).driver_writes is driver_writes


def test_one_partition_only_when_the_driver_reads_and_writes() -> None:
    assert route(BatchCounts(10, 0), 1, True, LIMITS) == Route(Reads.DRIVER, True)
    assert route(BatchCounts(10, 0), 1, True, LIMITS).one_partition
    # The driver reads 60 (below 100) but does not write them (not below 50).
    assert not route(BatchCounts(60, 0), 6, True, LIMITS).one_partition
    assert not Route(Reads.BY_RECEIPT, True).one_partition


def test_thresholds_of_zero_keep_every_micro_batch_on_the_connector() -> None:
    assert route(BatchCounts(0, 1), 0, True, OFF) == Route(Reads.BY_RECEIPT, False)
    assert not OFF.uses_driver
    assert LIMITS.uses_driver


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (99, Modes(native_first=False, collect_keys=True)),
        (100, Modes(native_first=False, collect_keys=False)),
        (399, Modes(native_first=False, collect_keys=False)),
        (400, Modes(native_first=True, collect_keys=False)),
    ],
)
def test_the_previous_micro_batch_decides_validation_and_key_collection(
    previous: int, expected: Modes
) -> None:
    assert modes(previous, LIMITS) == expected


# Spark's checkpoint logs, as a Kafka source's query writes them (Spark 3.5).
OFFSETS_3 = (
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795819013434,"conf":{}}\n'
    '{"pos.transactions":{"2":110,"1":95,"3":80,"0":90}}'
)
OFFSETS_4 = 'v1\n{"batchWatermarkMs":0}\n{"pos.transactions":{"2":112,"1":95,"3":85,"0":90}}'
STARTING = '\x00v1\n{"pos.transactions":{"2":0,"1":0,"3":0,"0":0}}'


def test_the_checkpoints_offset_logs_give_a_micro_batchs_size_before_it_is_read() -> None:
    from pos_lambda.speed_layer.batch_plan import logged_offsets, records_between

    third, fourth, start = (
        logged_offsets(OFFSETS_3),
        logged_offsets(OFFSETS_4),
        logged_offsets(STARTING),
    )
    assert third == {"pos.transactions": {"0": 90, "1": 95, "2": 110, "3": 80}}
    assert fourth is not None and third is not None and start is not None
    assert records_between(third, fourth) == 2 + 5
    assert records_between(start, third) == 90 + 95 + 110 + 80
    # A partition added between the two counts from 0.
    grown = {"pos.transactions": {**fourth["pos.transactions"], "4": 6}}
    assert records_between(third, grown) == 7 + 6


@pytest.mark.parametrize("text", ["", "v1\n", "v1\n{}\nnot json", 'v1\n{"a": 1}\n[1, 2]'])
def test_an_unreadable_offset_log_gives_no_size(text: str) -> None:
    from pos_lambda.speed_layer.batch_plan import logged_offsets

    assert logged_offsets(text) is None
