"""Pure DataFrame -> DataFrame transforms of the speed layer (no session, no I/O).

`check` validates raw Kafka records with the contract's own validator, so the
stream accepts exactly what the JSON Schema accepts; the rest shape rows for the
master dataset, the dead letters and the raw receipts table.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from schemas import contract
from views.aggregation import window_start

RAW_RECEIPT_COLUMNS = (
    "operation_id",
    "day",
    "happened_at",
    "vendor_fiscal_module",
    "transaction_id",
    "line_items",
    "item_quantity",
    "revenue",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "late",
)

# Kafka source column -> our name (the "kafka_" prefix keeps them apart from receipt fields).
KAFKA_COLUMNS = {
    "topic": "kafka_topic",
    "partition": "kafka_partition",
    "offset": "kafka_offset",
    "timestamp": "kafka_timestamp",
    "key": "kafka_key",
    "value": "raw_value",
}
RECEIPT_FIELDS = tuple(f.name for f in contract.spark_receipt_schema().fields)

CHECK_TYPE = StructType(
    [
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("receipt", contract.spark_receipt_schema()),
    ]
)


def _check_value(value: bytes | bytearray | None) -> tuple[str | None, str | None, object]:
    """Run on executors: the contract's validator, as (reason, detail, receipt)."""
    if value is None:
        return ("empty_value", "the Kafka record has no value", None)
    try:
        result = contract.parse_message(bytes(value))
        if isinstance(result, contract.Invalid):
            return (result.reason, result.detail[:1000], None)
        return (None, None, contract.receipt_to_spark_row(result))
    except Exception as exc:
        return ("internal_error", f"{type(exc).__name__}: {exc}"[:1000], None)


check_udf = F.udf(_check_value, CHECK_TYPE)


def check(kafka_records: DataFrame) -> DataFrame:
    """Kafka records plus `reason` (null when valid), `detail` and the parsed `receipt`."""
    checked = kafka_records.withColumn("_check", check_udf(F.col("value")))
    return checked.select(
        *(F.col(source).alias(name) for source, name in KAFKA_COLUMNS.items()),
        *(F.col(f"_check.{name}").alias(name) for name in ("reason", "detail", "receipt")),
    )


def is_valid() -> Column:
    return F.col("reason").isNull()


def dead_letters(checked: DataFrame) -> DataFrame:
    """Invalid records, keyed by their Kafka coordinates, with the reason."""
    return checked.where(~is_valid()).select(*KAFKA_COLUMNS.values(), "reason", "detail")


def archive_rows(checked: DataFrame, ingested_at: Column) -> DataFrame:
    """Master-dataset rows: every record as received, parsed fields where valid.

    `event_day` (the partition column) is the receipt's UTC day, or for invalid
    records the day they reached Kafka, so the batch layer finds late receipts
    under the day they belong to.
    """
    return checked.select(
        *KAFKA_COLUMNS.values(),
        ingested_at.alias("ingested_at"),
        is_valid().alias("valid"),
        "reason",
        "detail",
        "receipt",
        F.coalesce(F.to_date("receipt.happened_at"), F.to_date("kafka_timestamp")).alias(
            "event_day"
        ),
    )


def arrival_delay_s() -> Column:
    """Seconds from when a receipt happened to when it reached Kafka."""
    return F.unix_timestamp("kafka_timestamp") - F.unix_timestamp("receipt.happened_at")


def beyond_bound(max_lateness_s: int) -> Column:
    """A valid receipt too late for the speed views (left to the batch layer)."""
    return is_valid() & (arrival_delay_s() > max_lateness_s)


def receipt_rows(checked: DataFrame, late_threshold_s: int, max_lateness_s: int) -> DataFrame:
    """Valid receipts flattened to the raw-table columns, plus `beyond_bound`.

    late: the record reached Kafka more than the contract's LATE_THRESHOLD after it
    happened. beyond_bound: later than the speed layer's bound; such receipts are
    left to the batch layer.
    """
    r = checked.where(is_valid())
    return r.select(
        F.to_date("receipt.happened_at").alias("day"),
        *(F.col(f"receipt.{name}").alias(name) for name in RECEIPT_FIELDS),
        "kafka_partition",
        "kafka_offset",
        "kafka_timestamp",
        (arrival_delay_s() > late_threshold_s).alias("late"),
        beyond_bound(max_lateness_s).alias("beyond_bound"),
    )


def touched_windows(receipts: DataFrame) -> DataFrame:
    """(operation_id, day, window_start) of the windows a batch of receipts falls in."""
    return receipts.select(
        "operation_id",
        "day",
        window_start(F.col("happened_at")).alias("window_start"),
    ).distinct()
