"""pos_lambda.views.batch: the batch layer's pure transforms, against literal expected rows."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import functions as F

from pos_lambda.views.batch import batch_aggregates, device_gaps, fixes

T = datetime(2026, 3, 2, 8, 0, 5)  # the session and the process run in UTC (conftest)
RECEIPT = (
    "operation_id int, happened_at timestamp, item_quantity long, revenue decimal(18,2), "
    "late boolean, beyond_bound boolean"
)
DUPLICATE = "operation_id int, winner_happened_at timestamp, conflict boolean"


def test_batch_aggregates_add_what_the_batch_absorbed(local_spark: Any) -> None:
    winners = local_spark.createDataFrame(
        [
            (1, T, 2, Decimal("3.80"), False, False),
            (1, T.replace(minute=14), 1, Decimal("1.00"), True, True),
            (1, T.replace(minute=15), 5, Decimal("10.00"), False, False),
            (2, T, 1, Decimal("0.50"), False, False),
        ],
        RECEIPT,
    )
    duplicates = local_spark.createDataFrame(
        [(1, T, False), (1, T, True), (1, T.replace(minute=20), False)], DUPLICATE
    )
    rows = {
        (r.operation_id, r.window_start): tuple(r)[3:]
        for r in batch_aggregates(winners, duplicates).collect()
    }
    assert rows == {
        (1, T.replace(second=0)): (2, 3, Decimal("4.80"), 1, 2, 1, 1),
        (1, T.replace(minute=15, second=0)): (1, 5, Decimal("10.00"), 0, 1, 0, 0),
        (2, T.replace(second=0)): (1, 1, Decimal("0.50"), 0, 0, 0, 0),
    }


def test_fixes_compare_windows_of_either_view(local_spark: Any) -> None:
    d, w1, w2, w3 = (
        date(2026, 3, 2),
        T.replace(second=0),
        T.replace(minute=15),
        T.replace(minute=30),
    )
    batch = local_spark.createDataFrame(
        [(1, d, w1, 3, Decimal("4.80"), 2, 1, 0), (1, d, w2, 1, Decimal("9.00"), 0, 0, 1)],
        "operation_id int, day date, window_start timestamp, receipt_count int, "
        "revenue decimal(38,2), duplicates int, conflicts int, beyond_speed_bound int",
    )
    speed = local_spark.createDataFrame(
        [(1, d, w1, 3, Decimal("4.80")), (1, d, w3, 1, Decimal("2.00"))],
        "operation_id int, day date, window_start timestamp, receipt_count int, "
        "revenue decimal(38,2)",
    )
    rows = {r.window_start: tuple(r)[3:] for r in fixes(batch, speed).collect()}
    assert rows == {
        w1: (3, 3, Decimal("4.80"), Decimal("4.80"), Decimal("0.00"), 0, 2, 1, 0),
        w2: (1, 0, Decimal("9.00"), Decimal("0.00"), Decimal("9.00"), 1, 0, 0, 1),
        w3: (0, 1, Decimal("0.00"), Decimal("2.00"), Decimal("-2.00"), -1, 0, 0, 0),
    }


def test_increments_count_new_winners_and_duplicates_of_windows_without_new_winners(
    local_spark: Any,
) -> None:
    from pos_lambda.views.batch import increments

    winners = local_spark.createDataFrame(
        [(1, T, 2, Decimal("3.80"), True, True)], RECEIPT
    ).withColumn("day", F.to_date("happened_at"))
    # A resend and a conflict of receipts an earlier fold counted (08:30, 9 March 23:50).
    duplicates = local_spark.createDataFrame(
        [(1, T.replace(minute=31), False), (1, datetime(2026, 3, 9, 23, 50), True)], DUPLICATE
    )
    rows = {
        (r.operation_id, r.day, r.window_start): tuple(r)[3:]
        for r in increments(winners, duplicates).collect()
    }
    assert rows == {
        (1, date(2026, 3, 2), T.replace(second=0)): (1, 2, Decimal("3.80"), 1, 0, 0, 1),
        (1, date(2026, 3, 2), T.replace(minute=30, second=0)): (0, 0, Decimal("0.00"), 0, 1, 0, 0),
        (1, date(2026, 3, 9), datetime(2026, 3, 9, 23, 45)): (0, 0, Decimal("0.00"), 0, 1, 1, 0),
    }


def test_plus_adds_measures_per_window_of_either_side(local_spark: Any) -> None:
    from pos_lambda.views.batch import plus

    d, w1, w2 = date(2026, 3, 2), T.replace(second=0), T.replace(minute=15, second=0)
    schema = (
        "operation_id int, day date, window_start timestamp, receipt_count int, "
        "item_quantity long, revenue decimal(38,2), late_count int, duplicates int, "
        "conflicts int, beyond_speed_bound int"
    )
    committed = local_spark.createDataFrame(
        [
            (1, d, w1, 3, 4, Decimal("4.80"), 1, 2, 1, 0),
            (2, d, w1, 1, 1, Decimal("1.00"), 0, 0, 0, 0),
        ],
        schema,
    )
    added = local_spark.createDataFrame(
        [
            (1, d, w1, 1, 2, Decimal("0.20"), 0, 1, 0, 1),
            (1, d, w2, 1, 1, Decimal("9.99"), 1, 0, 0, 0),
        ],
        schema,
    )
    rows = {
        (r.operation_id, r.window_start): tuple(r)[3:] for r in plus(committed, added).collect()
    }
    assert rows == {
        (1, w1): (4, 6, Decimal("5.00"), 1, 3, 1, 1),
        (2, w1): (1, 1, Decimal("1.00"), 0, 0, 0, 0),
        (1, w2): (1, 1, Decimal("9.99"), 1, 0, 0, 0),
    }


def test_device_gaps_per_store_day_and_device(local_spark: Any) -> None:
    d = date(2026, 3, 2)
    at = [T.replace(minute=m) for m in range(8)]
    receipts = local_spark.createDataFrame(
        [
            # store 104, till 2: 3311-3312 lost at the till; 3310 arrived last (late).
            (104, d, 2, 3313, at[3]),
            (104, d, 2, 3309, at[0]),
            (104, d, 2, 3314, at[4]),
            (104, d, 2, 3310, at[1]),
            # store 104, till 3: restarted at 1 after 88, no gap.
            (104, d, 3, 87, at[0]),
            (104, d, 3, 88, at[1]),
            (104, d, 3, 1, at[2]),
            (104, d, 3, 2, at[5]),
            # store 107, till 2: complete, same device number as store 104's.
            (107, d, 2, 5, at[0]),
            (107, d, 2, 6, at[1]),
        ],
        "operation_id int, day date, vendor_fiscal_module int, transaction_id long, "
        "happened_at timestamp",
    ).withColumn("revenue", F.lit("1.90").cast("decimal(18,2)"))
    rows = {
        (r.operation_id, r.vendor_fiscal_module): tuple(r)[3:]
        for r in device_gaps(receipts, max_jump=1000).collect()
    }
    assert rows == {
        (104, 2): (3309, 3314, 4, 2, ["3311-3312"], [], Decimal("7.60")),
        (104, 3): (87, 2, 4, 0, [], [1], Decimal("7.60")),
        (107, 2): (5, 6, 2, 0, [], [], Decimal("3.80")),
    }
