"""A views micro-batch's route, decided by one pure function from plain values: how it
is taken before it is read (its expected size) and, once counted, how it reads and
writes. Each threshold on both sides, and the two decisions' combinations."""

from __future__ import annotations

import pytest

from pos_lambda.speed_layer.batch_plan import Counted, Reads, Route, Thresholds, route
from pos_lambda.speed_layer.progress import BatchCounts

LIMITS = Thresholds(
    driver_reads_below=100, driver_writes_below=50, bucket_reads_from=10.0, native_check_from=400
)
OFF = Thresholds(
    driver_reads_below=0, driver_writes_below=0, bucket_reads_from=10.0, native_check_from=400
)
SMALL = Route(native_first=False, collect_keys=True)  # the warm-up's small route
BACKLOG = Route(native_first=True, collect_keys=False)  # ... and its backlog route


def counted(valid: int, invalid: int = 0, buckets: int = 1) -> Counted:
    return Counted(BatchCounts(valid, invalid), buckets)


@pytest.mark.parametrize(
    ("expected", "taken"),
    [
        (99, Route(native_first=False, collect_keys=True)),
        (100, Route(native_first=False, collect_keys=False)),
        (399, Route(native_first=False, collect_keys=False)),
        (400, Route(native_first=True, collect_keys=False)),
    ],
)
def test_the_expected_size_decides_validation_and_key_collection_before_the_read(
    expected: int, taken: Route
) -> None:
    assert route(LIMITS, expected) == taken  # nothing read yet: no reads or writes decided
    assert taken.reads is None and not taken.driver_writes


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
    taken = Route(native_first=False, collect_keys=collected)
    assert route(LIMITS, taken, counted(valid, buckets=20)).reads is reads


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
    assert route(LIMITS, BACKLOG, counted(valid, buckets=buckets)).reads is reads


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
    assert route(LIMITS, SMALL, counted(valid, invalid)).driver_writes is driver_writes


@pytest.mark.parametrize(
    ("expected", "found", "decided"),
    [
        # Expected small, found small: keys collected, the driver reads and writes.
        (10, counted(10), Route(False, True, Reads.DRIVER, driver_writes=True)),
        # Expected small, found 60: the driver still reads (below 100), the connector writes.
        (10, counted(60, buckets=6), Route(False, True, Reads.DRIVER, driver_writes=False)),
        # Expected small, found 100 (a burst): its keys were collected, but too many.
        (10, counted(100, buckets=20), Route(False, True, Reads.BY_RECEIPT, False)),
        # Expected a backlog, found 10 in 10 buckets: no keys to read by, the connector
        # reads by receipt; the driver writes the few rows.
        (500, counted(10, buckets=10), Route(True, False, Reads.BY_RECEIPT, True)),
        # ... found a backlog: whole receipt_keys partitions, the connector writes.
        (500, counted(200, buckets=20), Route(True, False, Reads.BY_PARTITION, False)),
        # Expected between the thresholds: Python validation, no keys collected.
        (200, counted(10, buckets=2), Route(False, False, Reads.BY_RECEIPT, True)),
    ],
)
def test_one_route_from_the_expected_size_and_the_counts(
    expected: int, found: Counted, decided: Route
) -> None:
    assert route(LIMITS, expected, found) == decided
    # How it was taken is what the same function said before the read.
    before = route(LIMITS, expected)
    assert (decided.native_first, decided.collect_keys) == (
        before.native_first,
        before.collect_keys,
    )


def test_a_route_already_taken_is_kept_whatever_the_size_would_say() -> None:
    # The warm-up takes both routes on the same few records.
    assert route(LIMITS, SMALL, counted(10)) == Route(False, True, Reads.DRIVER, True)
    assert route(LIMITS, BACKLOG, counted(10)) == Route(True, False, Reads.BY_PARTITION, True)
    # A counted route passed again is taken afresh: its reads and writes are redecided.
    assert route(LIMITS, Route(False, True, Reads.BY_PARTITION, False), counted(10)) == Route(
        False, True, Reads.DRIVER, True
    )


def test_one_partition_only_when_the_driver_reads_and_writes() -> None:
    assert route(LIMITS, SMALL, counted(10)).one_partition
    # The driver reads 60 (below 100) but does not write them (not below 50).
    assert not route(LIMITS, SMALL, counted(60, buckets=6)).one_partition
    assert not Route(False, True, Reads.BY_RECEIPT, True).one_partition
    assert not route(LIMITS, 10).one_partition  # not counted yet


def test_thresholds_of_zero_keep_every_micro_batch_on_the_connector() -> None:
    assert route(OFF, 0) == Route(native_first=False, collect_keys=False)
    assert route(OFF, 0, counted(0, 1, 0)) == Route(False, False, Reads.BY_RECEIPT, False)
    # Even with its keys collected (a warm-up's small route), no driver read or write.
    assert route(OFF, SMALL, counted(0, 1, 0)) == Route(False, True, Reads.BY_RECEIPT, False)
    assert not OFF.uses_driver
    assert LIMITS.uses_driver


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
