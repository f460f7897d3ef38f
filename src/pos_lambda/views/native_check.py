"""The contract's valid path in Spark's own expressions: no Python worker per record.

`records.check` runs the contract's validator (`contract.parse_message`) on every
record the native path here does not accept. The native path is deliberately
narrower than the contract, so that it never has to name a reason:

- it accepts a record only when `to_json(from_json(value))` gives back the very bytes
  of the record: canonical compact JSON in the contract's field order, every value of
  its type, nothing else (no extra field, no duplicate key, no `1.0` for an integer,
  no number for money, no whitespace, no escape Spark would write otherwise);
- and every value is within the contract's bounds, by the same limits (a timestamp
  by a stricter pattern: offsets under 18 h, fields in their calendar ranges).

Everything else, invalid or merely unusual (a field this v1 does not know, pretty
printing, a non-ASCII title escaped as `\\u00e9`), goes to the Python validator,
which decides and names the reason. The producer writes canonical JSON, so nearly
every record takes the native path. The receipt it yields equals the validator's
(tests/unit/views/test_native_check.py checks both on generated and hostile input).
"""

from __future__ import annotations

from functools import cache

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pos_lambda.schemas import contract
from pos_lambda.schemas.contract import LIMITS

MESSAGE_SCHEMA = contract.spark_message_schema()
RECEIPT_SCHEMA = contract.spark_receipt_schema()
_ITEMS = contract.LINE_ITEMS_JSON_NAME
MESSAGE = "_message"  # the parsed value (a column of `parsed` records)

# A strict subset of the schema's TIMESTAMP_PATTERN: fields within their calendar
# ranges and an offset Spark and Python both take (Java's ZoneOffset stops at 18 h).
# `\z` is the very end (Java's `$`, like Python's, also matches before a final "\n").
_TIMESTAMP = (
    r"^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?"
    r"(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9])\z"
)
_PRICE = contract.PRICE_PATTERN.removesuffix("$") + r"\z"


def _type(name: str) -> str:
    return RECEIPT_SCHEMA[name].dataType.simpleString()


def _between(column: Column, low: int, high: int) -> Column:
    return (column >= low) & (column <= high)


def _item_ok(item: Column) -> Column:
    title, price, amount = item["title"], item["price"], item["amount"]
    return (
        item.isNotNull()
        & _between(F.char_length(title), 1, LIMITS.max_title_chars)
        & price.rlike(_PRICE)
        & _between(amount, -LIMITS.max_abs_amount, LIMITS.max_abs_amount)
        & (amount != 0)
    )


def _accepted(value: Column, message: Column, instant: Column) -> Column:
    ids = {
        "operation_id": LIMITS.max_store_or_device_id,
        "vendor_fiscal_module": LIMITS.max_store_or_device_id,
        "transaction_id": LIMITS.max_transaction_id,
    }
    items = message[_ITEMS]
    checks = [
        F.octet_length(value) <= LIMITS.max_message_bytes,
        F.encode(F.to_json(message), "UTF-8") == value,  # canonical: nothing else in it
        message["happened_at"].rlike(_TIMESTAMP),
        instant.isNotNull(),  # the date exists (no 30 February)
        instant >= F.lit(LIMITS.earliest),
        instant < F.lit(LIMITS.latest_exclusive),
        *(_between(message[name], 1, high) for name, high in ids.items()),
        _between(F.size(items), 1, LIMITS.max_line_items),
        F.forall(items, _item_ok),
    ]
    every = checks[0]
    for check in checks[1:]:
        every = every & check
    return F.coalesce(every, F.lit(False))  # a null anywhere (a missing field): not ours


def _receipt(message: Column, instant: Column) -> Column:
    """The receipt row the validator would give (RECEIPT_SCHEMA), from a parsed message."""
    # One cast of the whole array (struct fields convert by position): the prices are
    # decimal strings of the contract's shape, the amounts within int, as checked.
    items = message[_ITEMS].cast(RECEIPT_SCHEMA[contract.LINE_ITEMS_COLUMN].dataType)
    revenue_type = _type("revenue")
    revenue = F.aggregate(
        items,
        F.lit(0).cast(revenue_type),
        lambda total, i: (total + i["price"] * i["amount"]).cast(revenue_type),
    )
    quantity = F.aggregate(
        items, F.lit(0).cast("bigint"), lambda total, i: total + i["amount"].cast("bigint")
    )
    fields = {
        "happened_at": instant,
        **{
            f.column_name: message[f.name].cast(_type(f.column_name))
            for f in contract.SCALAR_FIELDS
            if f.kind is not contract.TIMESTAMP
        },
        contract.LINE_ITEMS_COLUMN: items,
        "item_quantity": quantity,
        "revenue": revenue,
    }
    return F.struct(*(fields[name].alias(name) for name in RECEIPT_SCHEMA.fieldNames()))


def parsed(records: DataFrame) -> DataFrame:
    """`records` (with the Kafka `value`) plus MESSAGE: the value parsed by `from_json`,
    once, in a projection of its own that every check of `receipt()` reads."""
    return records.withColumn(MESSAGE, _message())


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def receipt() -> Column:
    """Over `parsed` records: the receipt (RECEIPT_SCHEMA) of a record the native path
    accepts, else null (then the Python validator decides).

    Nothing here fails on any bytes, ANSI mode or not: the typed casts run only on
    accepted records (a CASE branch is evaluated only when taken), the timestamp's is
    a `try_` conversion (evaluated once: Spark eliminates the common subexpression).
    """
    message = F.col(MESSAGE)
    instant = F.try_to_timestamp(message["happened_at"])
    return F.when(_accepted(F.col("value"), message, instant), _receipt(message, instant))


@cache
def stated_instant() -> Column:
    """Over Kafka records: the `happened_at` a value states, when it is in the native
    path's timestamp form, else null; without judging the rest of the record (the
    archiver's partition day, `records.archive_rows`). Cheap: one JSON field read."""
    stated = F.get_json_object(F.col("value").cast("string"), "$.happened_at")
    return F.when(stated.rlike(_TIMESTAMP), F.try_to_timestamp(stated))


def with_native_receipt(records: DataFrame, name: str) -> DataFrame:
    """`records` plus column `name`: `receipt()`."""
    return parsed(records).withColumn(name, receipt()).drop(MESSAGE)


@cache
def _message() -> Column:
    return F.from_json(F.col("value").cast("string"), MESSAGE_SCHEMA)
