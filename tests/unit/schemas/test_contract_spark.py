"""The contract's Spark schemas used by Spark itself (local mode): raw messages parse with
from_json, and the largest valid receipt fits a receipt row without overflow."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from pyspark.sql import functions as F

from pos_lambda.schemas import contract
from pos_lambda.schemas.contract import Receipt, parse_message

MESSAGE = (
    b'{"happened_at": "2017-09-19T22:48:03+00:00", "operation_id": 1, "transaction_id": 42,'
    b' "vendor_fiscal_module": 123, "loyalty_card": "x",'
    b' "transactions": [{"title": "Espresso", "price": "1.90", "amount": 2}]}'
)


def test_from_json_keeps_the_raw_text_of_times_and_money(local_spark: Any) -> None:
    df = local_spark.createDataFrame([(MESSAGE,)], "value binary")
    row = df.select(
        F.from_json(F.col("value").cast("string"), contract.spark_message_schema()).alias("m")
    ).first()
    assert row is not None
    assert row.m.asDict(recursive=True) == {
        "happened_at": "2017-09-19T22:48:03+00:00",
        "operation_id": 1,
        "transaction_id": 42,
        "vendor_fiscal_module": 123,
        "transactions": [{"title": "Espresso", "price": "1.90", "amount": 2}],
    }


def test_the_largest_valid_receipt_round_trips_through_a_receipt_row(local_spark: Any) -> None:
    biggest = parse_message(
        b'{"happened_at": "2099-12-31T23:59:59Z", "operation_id": 2147483647,'
        b' "transaction_id": 9223372036854775807, "vendor_fiscal_module": 2147483647,'
        b' "transactions": ['
        + b",".join([b'{"title": "x", "price": "9999999999.99", "amount": -10000}'] * 200)
        + b"]}"
    )
    assert isinstance(biggest, Receipt)
    df = local_spark.createDataFrame(
        [contract.receipt_to_spark_row(biggest)], contract.spark_receipt_schema()
    )
    row = df.select("transaction_id", "item_quantity", "revenue", "happened_at").first()
    assert row is not None
    assert row.transaction_id == 2**63 - 1
    assert row.item_quantity == -2_000_000
    assert row.revenue == Decimal("-19999999999980000.00")
    # The unit-test session pins TZ=UTC, so collect() gives naive UTC datetimes.
    assert row.happened_at.replace(tzinfo=UTC) == datetime(2099, 12, 31, 23, 59, 59, tzinfo=UTC)
