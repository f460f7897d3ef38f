"""Record-level core on literal rows and generated input, in local Spark.

The worst receipt the contract accepts is computed from `LIMITS` (not from the code
under test) and pushed through every derived type; generated messages at, inside and
beyond every bound go through `records.check`, the very transform the stream runs.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from pos_lambda.schemas import contract
from pos_lambda.schemas.contract import LIMITS
from pos_lambda.views import records
from pos_lambda.views.aggregation import REVENUE_TYPE, aggregate_15m

# The worst case, from the limits alone.
MAX_PRICE = Decimal(10) ** LIMITS.price_integer_digits - Decimal("0.01")
WORST_REVENUE = LIMITS.max_line_items * LIMITS.max_abs_amount * MAX_PRICE
WORST_ITEMS = [{"title": "x" * LIMITS.max_title_chars, "price": str(MAX_PRICE),
                "amount": -LIMITS.max_abs_amount}] * LIMITS.max_line_items  # fmt: skip
WORST = json.dumps(
    {
        "happened_at": "2099-12-31T23:59:59.999999Z",
        "operation_id": LIMITS.max_store_or_device_id,
        "transaction_id": LIMITS.max_transaction_id,
        "vendor_fiscal_module": LIMITS.max_store_or_device_id,
        "transactions": WORST_ITEMS,
    }
).encode()
KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)


def _tea(happened_at: str) -> bytes:
    """A valid message: two teas at 1.5 in store 1, device 3, receipt 2."""
    doc = {"happened_at": happened_at, "operation_id": 1, "transaction_id": 2,
           "vendor_fiscal_module": 3,
           "transactions": [{"title": "Tea", "price": "1.5", "amount": 2}]}  # fmt: skip
    return json.dumps(doc).encode()


def _kafka(spark: Any, values: list[bytes | None]) -> Any:
    at = datetime(2026, 3, 2, 9, tzinfo=UTC)
    rows = [(None, v, "t", 0, n, at) for n, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_DDL)


def test_the_worst_accepted_receipt_fits_every_derived_type(local_spark: Any) -> None:
    assert len(WORST) <= LIMITS.max_message_bytes
    checked = records.check(_kafka(local_spark, [WORST]))
    rows = records.receipt_rows(checked, 900 * 10**6, 48 * 3600 * 10**6)
    [row] = rows.collect()
    assert row.revenue == -WORST_REVENUE == Decimal("-19999999999980000.00")
    assert row.item_quantity == -LIMITS.max_line_items * LIMITS.max_abs_amount
    assert row.transaction_id == LIMITS.max_transaction_id
    # A window of a million such receipts still fits the aggregate's revenue type.
    digits = REVENUE_TYPE.precision - REVENUE_TYPE.scale
    assert Decimal(10) ** digits > WORST_REVENUE * 10**6
    [agg] = aggregate_15m(rows).collect()
    assert (agg.receipt_count, agg.revenue) == (1, -WORST_REVENUE)
    assert records.RECEIPT_SCHEMA["revenue"].dataType.simpleString() == "decimal(19,2)"


def test_the_master_dataset_keeps_records_as_received_under_the_day_they_state(
    local_spark: Any,
) -> None:
    values = [
        _tea("2026-03-04T23:30:00-01:00"),  # 5 March in UTC; Kafka has it on 2 March
        b'{"happened_at": "2026-03-01T10:00:00Z", "operation_id": "x"}',  # invalid, dated
        _tea("2026-02-30T10:00:00Z"),  # no such day: the Kafka day
        b"\xff not json",
        None,
    ]
    kafka = _kafka(local_spark, values)
    at = datetime(2026, 3, 2, 10, tzinfo=UTC)
    archived = records.archive_rows(kafka, F.lit(at))
    assert tuple(archived.columns) == records.MASTER_COLUMNS
    got = [(r.raw_value, r.event_day.isoformat(), r.ingested_at) for r in archived.collect()]
    days = ["2026-03-05", "2026-03-01", "2026-03-02", "2026-03-02", "2026-03-02"]
    assert got == [(v, d, at.replace(tzinfo=None)) for v, d in zip(values, days, strict=True)]
    # Back as the Kafka records they were: judged as if they had just arrived.
    again = records.check(records.from_archive(archived)).select("kafka_offset", "reason")
    assert sorted(tuple(r) for r in again.collect()) == [
        (0, None), (1, "missing_field:transaction_id"), (2, "bad_timestamp"),
        (3, "invalid_encoding"), (4, "empty_value"),
    ]  # fmt: skip


def test_a_value_that_would_not_fit_becomes_a_dead_letter_not_a_failed_task() -> None:
    receipt_row = (datetime(2026, 3, 2, tzinfo=UTC), 1, 1, 1, [], 0, Decimal("1E+17"))
    problem = records._unfit(receipt_row, records.RECEIPT_SCHEMA, "")
    assert problem == "revenue: 1E+17 does not fit decimal(19,2)"
    assert records._unfit((None, 2**31, 1, 1, [], 0, None), records.RECEIPT_SCHEMA, "") == (
        "operation_id: 2147483648 does not fit int"
    )


def test_check_splits_records_into_receipts_and_dead_letters(local_spark: Any) -> None:
    good = _tea("2026-03-02T09:00:00.5+01:00")
    checked = records.check(_kafka(local_spark, [good, b"{", None]))
    assertDataFrameEqual(
        checked.select(
            "kafka_offset", "reason", F.col("receipt.happened_at"), F.col("receipt.revenue")
        ),
        local_spark.createDataFrame(
            [
                (0, None, datetime(2026, 3, 2, 8, 0, 0, 500000), Decimal("3.00")),
                (1, "invalid_json", None, None),
                (2, "empty_value", None, None),
            ],
            "kafka_offset bigint, reason string, happened_at timestamp, revenue decimal(19,2)",
        ),
    )


def test_a_dead_letter_keeps_a_bounded_prefix_with_the_whole_values_length_and_hash(
    local_spark: Any,
) -> None:
    big = b"\xff" + b"j" * 300_000 + b"END"  # over the contract's 64 KiB: too_large
    short = b"nope"
    checked = records.check(_kafka(local_spark, [big, short, None]))
    dead = records.dead_letters(checked)
    assert tuple(dead.columns) == records.DEAD_LETTER_COLUMNS
    got = [
        (r.kafka_offset, bytes(r.raw_value) if r.raw_value is not None else None,
         r.value_length, r.value_sha256, r.reason)
        for r in dead.orderBy("kafka_offset").collect()
    ]  # fmt: skip
    assert records.DEAD_LETTER_PREFIX_BYTES == 4096
    assert got == [
        (0, b"\xff" + b"j" * 4095, 300_004, hashlib.sha256(big).hexdigest(), "too_large"),
        (1, b"nope", 4, hashlib.sha256(short).hexdigest(), "invalid_json"),
        (2, None, None, None, "empty_value"),
    ]


def test_late_uses_full_precision(local_spark: Any) -> None:
    # Sent 900.4 s after it happened: late by the contract (and the ledger), though
    # whole seconds would say 900, not late.
    message = _tea("2026-03-02T08:44:59.600Z")
    checked = records.check(_kafka(local_spark, [message]))  # sent at 09:00:00.000
    [row] = records.receipt_rows(checked, 900 * 10**6, 10**12).collect()
    assert row.late is True


ITEM = st.fixed_dictionaries(
    {
        "title": st.text(max_size=LIMITS.max_title_chars + 1),
        "price": st.one_of(
            st.sampled_from([str(MAX_PRICE), "0", "0.00", "10000000000", "-1", "1.001"]),
            st.decimals(min_value=0, max_value=MAX_PRICE, places=2).map(str),
        ),
        "amount": st.integers(-LIMITS.max_abs_amount - 1, LIMITS.max_abs_amount + 1),
    }
)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {
            "happened_at": st.sampled_from(
                [
                    "2099-12-31T23:59:59.999999Z",
                    "2000-01-01T00:00:00Z",
                    "1999-12-31T23:59:59Z",
                    "2026-03-02T09:00:00+14:00",
                    "2026-03-02T09:00:00Z\n",
                ]
            ),
            "operation_id": st.integers(0, LIMITS.max_store_or_device_id + 1),
            "transaction_id": st.integers(0, LIMITS.max_transaction_id + 1),
            "vendor_fiscal_module": st.integers(0, LIMITS.max_store_or_device_id + 1),
            "transactions": st.one_of(
                st.lists(ITEM, max_size=3),
                st.integers(LIMITS.max_line_items - 1, LIMITS.max_line_items + 1).map(
                    lambda n: WORST_ITEMS[:1] * n
                ),
            ),
        }
    ).map(lambda d: json.dumps(d).encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGE, min_size=1, max_size=40))
def test_every_record_ends_as_one_receipt_or_one_dead_letter(
    local_spark: Any, values: list[bytes]
) -> None:
    checked = records.check(_kafka(local_spark, list(values))).cache()
    receipts = records.receipt_rows(checked, 900 * 10**6, 10**12).count()  # no task fails
    dead = records.dead_letters(checked).select("kafka_offset", "reason").collect()
    assert receipts + len(dead) == len(values)
    assert all(contract.reason_code(d.reason) in contract.REASONS for d in dead)
    assert not [d for d in dead if d.reason in ("internal_error", "unrepresentable")]
    checked.unpersist()
