"""Record-level views both layers share: Kafka record -> checked record -> receipt row.

Pure DataFrame -> DataFrame functions (no session, no I/O, no clock):

- `check`: every Kafka record with the contract's verdict (`reason` null when valid)
  and the parsed receipt, via the contract's own validator (or, `native_first`, Spark's
  own expressions for canonical valid records and the validator for the rest: the same
  verdicts), so the stream and the batch accept exactly what the JSON Schema accepts.
  It never raises: a record the validator accepts but Spark could not store (it cannot
  happen: a test derives the worst case from the limits) or a validator bug becomes a
  dead letter too.
- `dead_letters`: invalid records by Kafka coordinates, with a bounded prefix of the
  value, its length and SHA-256 (the master dataset keeps the whole value).
- `archive_rows`, `from_archive`: every Kafka record as received, to master-dataset
  rows (MASTER_COLUMNS: no verdict) and back.
- `receipt_rows`: valid receipts flattened, with the `late` rule, the lateness bound
  and a content hash that tells a resend (same content) from a conflict.

The speed layer applies them to a micro-batch of Kafka records, the batch layer to
master-dataset rows (which carry the same columns).

Column expressions that depend only on constants are built once per driver
(`functools.cache`), here and in the other view modules: a Column is an unresolved
expression, valid in any plan, and building one costs py4j round trips, which every
speed micro-batch would otherwise pay again (a 10-record views micro-batch made ~2,500
of them, ~640 with the expressions built once).
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pos_lambda.schemas import contract, cql
from pos_lambda.views import content, native_check

# Kafka source column -> our name (the "kafka_" prefix keeps them apart from receipt fields).
KAFKA_COLUMNS = {
    "topic": "kafka_topic",
    "partition": "kafka_partition",
    "offset": "kafka_offset",
    "timestamp": "kafka_timestamp",
    "key": "kafka_key",
    "value": "raw_value",
}
RECEIPT_SCHEMA = contract.spark_receipt_schema()
RECEIPT_FIELDS = tuple(f.name for f in RECEIPT_SCHEMA.fields)
COORDINATES = ("kafka_partition", "kafka_offset")
# A dead letter keeps at most this many bytes of its value (`raw_value`), with the whole
# value's length (`value_length`) and SHA-256 (`value_sha256`). Kafka accepts records up
# to the broker's message.max.bytes (1 MB by default), far more than a receipt can be:
# 60 junk values of 300 KB in one partition made one 18 MB CQL request, over Cassandra's
# 16 MiB message limit, and the query failed on every replay. Bounded, a dead-letter row
# is small whatever the input; the master dataset keeps every value whole (the archiver
# stores each record as received), and the hash names it there.
DEAD_LETTER_PREFIX_BYTES = 4096
DEAD_LETTER_COLUMNS = (
    *KAFKA_COLUMNS.values(),
    "value_length",
    "value_sha256",
    "reason",
    "detail",
    # The natural key the value claims (src/pos_lambda/schemas/cql.py DEAD_LETTER_KEY_COLUMNS).
    *(name for name, _ in cql.DEAD_LETTER_KEY_COLUMNS),
)
# The master dataset's columns: the record as received, when it was archived, its day.
MASTER_COLUMNS = (*KAFKA_COLUMNS.values(), "ingested_at", "event_day")

# Columns of a receipt row: the key, the receipt, where it came from, the derived flags.
RECEIPT_ROW_COLUMNS = (
    "operation_id",
    "day",
    *(f for f in RECEIPT_FIELDS if f != "operation_id"),
    "content_hash",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "late",
    "beyond_bound",
)

CHECK_TYPE = StructType(
    [
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("receipt", RECEIPT_SCHEMA),
    ]
)
_INT_BOUNDS: dict[type, int] = {IntegerType: 2**31, LongType: 2**63}


def _unfit(value: Any, data_type: DataType, path: str) -> str | None:
    """Why `value` would not convert to `data_type` in the JVM, or None if it fits.

    A conversion failure after the UDF returns fails the whole task (and the query,
    for good, on every replay); checking here turns it into a dead letter instead.
    """
    if value is None:
        return None
    if isinstance(data_type, StructType):
        for field, item in zip(data_type.fields, value, strict=True):
            if problem := _unfit(item, field.dataType, f"{path}{field.name}."):
                return problem
        return None
    if isinstance(data_type, ArrayType):
        for n, item in enumerate(value):
            if problem := _unfit(item, data_type.elementType, f"{path}{n}."):
                return problem
        return None
    if isinstance(data_type, DecimalType):
        digits = data_type.precision - data_type.scale
        if abs(value) >= Decimal(10) ** digits:
            return f"{path.rstrip('.')}: {value} does not fit {data_type.simpleString()}"
        return None
    bound = _INT_BOUNDS.get(type(data_type))
    if bound is not None and not -bound <= value < bound:
        return f"{path.rstrip('.')}: {value} does not fit {data_type.simpleString()}"
    return None


def _check_value(value: bytes | bytearray | None) -> tuple[str | None, str | None, object]:
    """Run on executors: the contract's validator, as (reason, detail, receipt)."""
    if value is None:
        return ("empty_value", "the Kafka record has no value", None)
    try:
        result = contract.parse_message(bytes(value))
        if isinstance(result, contract.Invalid):
            return (result.reason, result.detail[:1000], None)
        row = contract.receipt_to_spark_row(result)
        if problem := _unfit(row, RECEIPT_SCHEMA, ""):
            return ("unrepresentable", problem[:1000], None)
        return (None, None, row)
    except Exception as exc:  # a validator bug: kept as data, replayable once fixed
        return ("internal_error", f"{type(exc).__name__}: {exc}"[:1000], None)


# Arrow-optimised (Spark 3.5): rows cross to the Python worker in Arrow batches instead
# of being pickled one by one; the same function, the same verdicts (measured 1.4x
# faster on a 50k-message micro-batch, identical output).
check_udf = F.udf(_check_value, CHECK_TYPE, useArrow=True)
_NATIVE, _CHECK = "_native_receipt", "_check"


def check(kafka_records: DataFrame, native_first: bool = False) -> DataFrame:
    """Kafka records (source columns) plus `reason` (null when valid), `detail`, `receipt`.

    native_first: canonical valid records are accepted in Spark's own expressions
    (pos_lambda.views.native_check) and only the rest cross to the contract's validator. The
    output is the same either way (tests/unit/views/test_native_check.py); the native
    path costs more to plan and less per record, so it pays for large micro-batches
    only (see docs/speed-performance.md).
    """
    if not native_first:
        return kafka_records.withColumn(_CHECK, _verdict()).select(*_checked_columns())
    native = native_check.parsed(kafka_records).withColumn(_NATIVE, native_check.receipt())
    return native.withColumn(_CHECK, _native_first_verdict()).select(*_checked_columns())


# Built once per driver, not per micro-batch (see the module's doc).
@cache
def _verdict() -> Column:
    return check_udf(F.col("value"))


@cache
def _native_first_verdict() -> Column:
    """(reason, detail, receipt): the native receipt, or the validator's verdict."""
    rejected = F.col(_NATIVE).isNull()
    accepted = F.struct(
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("string").alias("detail"),
        F.col(_NATIVE).alias("receipt"),
    )
    # A record the native path accepted crosses as a null (cheap); its verdict is dropped.
    python = check_udf(F.when(rejected, F.col("value")))
    return F.when(rejected, python).otherwise(accepted)


@cache
def _kafka_columns_renamed() -> tuple[Column, ...]:
    """The Kafka source's columns under our names (KAFKA_COLUMNS)."""
    return tuple(F.col(source).alias(name) for source, name in KAFKA_COLUMNS.items())


@cache
def _checked_columns() -> tuple[Column, ...]:
    return (
        *_kafka_columns_renamed(),
        *(F.col(f"{_CHECK}.{name}").alias(name) for name in ("reason", "detail", "receipt")),
    )


@cache
def is_valid() -> Column:
    return F.col("reason").isNull()


def dead_letters(checked: DataFrame) -> DataFrame:
    """Invalid records (DEAD_LETTER_COLUMNS), keyed by their Kafka coordinates, with the
    reason; `raw_value` is the value's first DEAD_LETTER_PREFIX_BYTES bytes, with the
    whole value's length and SHA-256 (hex), all null for a record without a value."""
    return checked.where(_invalid()).select(*_dead_letter_columns())


# Built once per driver, not per micro-batch (see the module's doc).
@cache
def _invalid() -> Column:
    return ~is_valid()


@cache
def _dead_letter_columns() -> tuple[Column, ...]:
    # Spark's own expressions on the binary value (substring and length count bytes):
    # no Python worker, and the whole value never leaves the executor that read it.
    value = F.col("raw_value")
    derived = {
        "raw_value": F.substring(value, 1, DEAD_LETTER_PREFIX_BYTES),
        "value_length": F.length(value),
        "value_sha256": F.sha2(value, 256),
        **{name: _claimed(name, cql_type) for name, cql_type in cql.DEAD_LETTER_KEY_COLUMNS},
    }
    return tuple(derived.get(c, F.col(c)).alias(c) for c in DEAD_LETTER_COLUMNS)


def _claimed(field: str, cql_type: str) -> Column:
    """The whole value's top-level JSON `field` as a `cql_type` integer: null where the
    value is not JSON, lacks the field or holds no such integer there (`try_cast`: never
    an error, whatever the session's ANSI mode). Spark's own expressions, like the rest."""
    spark_type = {"int": "int", "bigint": "bigint"}[cql_type]
    return F.expr(
        f"try_cast(get_json_object(cast(raw_value as string), '$.{field}') as {spark_type})"
    )


def archive_rows(kafka_records: DataFrame, ingested_at: Column) -> DataFrame:
    """Master-dataset rows (MASTER_COLUMNS): every Kafka record as received, unjudged.

    No verdict and no parsed receipt: the batch layer checks every record again on each
    run (`from_archive`, then `check`), so a fix to the validator reaches the archived
    past, and the archiver spends no Python worker on the stream. `event_day` (the
    partition column) is the UTC day of the `happened_at` the value states, when it is
    of the form the native path accepts (`native_check.stated_instant`), valid record
    or not, else the day the record reached Kafka. The batch layer reads every day (a
    key's winner depends on all its copies), so the day only places the file.
    """
    event_day = F.coalesce(F.to_date(native_check.stated_instant()), F.to_date("timestamp"))
    return kafka_records.select(
        *_kafka_columns_renamed(), ingested_at.alias("ingested_at"), event_day.alias("event_day")
    )


def from_archive(master_rows: DataFrame) -> DataFrame:
    """Master-dataset rows as the Kafka records they were (the source's column names),
    ready for `check`. Columns a master dataset written by an older archiver also has
    (its stored verdicts) are left out: the verdict is computed again, here and now."""
    return master_rows.select(
        *(F.col(name).alias(source) for source, name in KAFKA_COLUMNS.items())
    )


@cache
def arrival_delay_us() -> Column:
    """Microseconds from when a receipt happened to when this copy reached Kafka.

    Full precision, as the contract and the producer's ledger compare them: a receipt
    that reached Kafka 900.4 s after it happened is late, whole seconds would say not.
    """
    return F.unix_micros("kafka_timestamp") - F.unix_micros("receipt.happened_at")


@cache
def beyond_bound(max_lateness_us: int) -> Column:
    """A valid copy too late for the speed views (left to the batch layer)."""
    return is_valid() & (arrival_delay_us() > max_lateness_us)


def content_hash(happened_at: Column, line_items: Column) -> Column:
    """Hash of what a copy says (its instant and line items, typed): equal for resends.

    Typed values, not raw bytes: "1.9" and "1.90", or the same instant written with
    another offset, are the same receipt. The hashed text is the one
    `pos_lambda.views.content` defines (the alerts processor's); the fields are named
    explicitly so that the caller's column names cannot change the hash.
    """
    fields = (
        F.unix_micros(happened_at).alias(content.INSTANT_FIELD),
        line_items.alias(content.ITEMS_FIELD),
    )
    return F.sha2(F.to_json(F.struct(*fields)), 256)


def receipt_rows(checked: DataFrame, late_threshold_us: int, max_lateness_us: int) -> DataFrame:
    """Valid receipts as RECEIPT_ROW_COLUMNS: one row per copy (resends not yet removed).

    late: this copy reached Kafka more than the contract's LATE_THRESHOLD after it
    happened (the winner's flag is the receipt's). beyond_bound: later than the speed
    layer's bound; the speed views leave such receipts to the batch layer.
    """
    return checked.where(is_valid()).select(*_receipt_row(late_threshold_us, max_lateness_us))


@cache
def receipt_day() -> Column:
    """A checked record's store-day: the UTC date of its receipt's `happened_at`."""
    return F.to_date("receipt.happened_at")


@cache
def _receipt_row(late_threshold_us: int, max_lateness_us: int) -> tuple[Column, ...]:
    derived = {
        **{name: F.col(f"receipt.{name}") for name in RECEIPT_FIELDS},
        "day": receipt_day(),
        "content_hash": content_hash(F.col("receipt.happened_at"), F.col("receipt.line_items")),
        "late": arrival_delay_us() > late_threshold_us,
        "beyond_bound": beyond_bound(max_lateness_us),
    }
    return tuple(derived.get(name, F.col(name)).alias(name) for name in RECEIPT_ROW_COLUMNS)
