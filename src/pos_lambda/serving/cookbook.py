"""The CQL cookbook: the cqlsh query for each view, kept here once.

docs/serving.md shows `markdown()` (a unit test checks that it does, verbatim) and an
integration test runs every recipe against the real Cassandra with real data, so the
documented queries cannot rot. `pos-serve cookbook --store 101 --day 2026-03-02` prints
them for your own keyspace, store and day.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pos_lambda.schemas import cql


@dataclass(frozen=True)
class Recipe:
    title: str
    # str.format placeholders: keyspace, store, day, version, topic, partition, device,
    # transaction, bucket (from transaction)
    cql: str


RECIPES = (
    Recipe(
        "raw receipts of a store-day, in time order (speed view)",
        "SELECT happened_at, vendor_fiscal_module, transaction_id, item_quantity, revenue, late\n"
        f"  FROM {{keyspace}}.{cql.RAW_TABLE} WHERE operation_id = {{store}} AND day = '{{day}}';",
    ),
    Recipe(
        "speed aggregates: a store-day's 15-minute windows",
        "SELECT window_start, receipt_count, item_quantity, revenue, late_count\n"
        f"  FROM {{keyspace}}.{cql.AGG_SPEED_TABLE} WHERE operation_id = {{store}} "
        "AND day = '{day}';",
    ),
    Recipe(
        "batch aggregates, step 1: the pointer names the day's committed version",
        "SELECT day, version, covered_until, horizon\n"
        f"  FROM {{keyspace}}.{cql.BATCH_POINTER_TABLE} WHERE view_name = 'batch' "
        "AND day = '{day}';",
    ),
    Recipe(
        "batch aggregates, step 2: that version's partition (final up to covered_until)",
        "SELECT window_start, receipt_count, item_quantity, revenue, late_count, duplicates,\n"
        "       conflicts, beyond_speed_bound\n"
        f"  FROM {{keyspace}}.{cql.AGG_BATCH_TABLE} WHERE operation_id = {{store}} "
        "AND day = '{day}'\n   AND version = '{version}';",
    ),
    Recipe(
        "the last batch runs",
        "SELECT run_id, status, interval_start, interval_end, version, horizon, receipts,\n"
        "       duplicates_removed, conflicts, error\n"
        f"  FROM {{keyspace}}.{cql.BATCH_RUNS_TABLE} WHERE view_name = 'batch' LIMIT 5;",
    ),
    Recipe(
        "what the batch fixed in the speed view of a store-day",
        "SELECT window_start, speed_receipts, batch_receipts, receipts_fixed, revenue_fixed,\n"
        "       duplicates, conflicts\n"
        f"  FROM {{keyspace}}.{cql.BATCH_FIXES_TABLE} WHERE operation_id = {{store}} "
        "AND day = '{day}';",
    ),
    Recipe(
        "conflicting copies of a store-day's receipts, both versions side by side",
        "SELECT vendor_fiscal_module, transaction_id, differs, happened_at, winner_happened_at,\n"
        "       revenue, winner_revenue, kafka_offset, winner_kafka_offset\n"
        f"  FROM {{keyspace}}.{cql.CONFLICTS_TABLE} WHERE operation_id = {{store}} "
        "AND winner_day = '{day}';",
    ),
    Recipe(
        "dead letters of one Kafka partition",
        "SELECT kafka_offset, reason, detail\n"
        f"  FROM {{keyspace}}.{cql.DEAD_LETTERS_TABLE} WHERE kafka_topic = '{{topic}}' "
        "AND kafka_partition = {partition};",
    ),
    Recipe(
        "receipt status: a receipt's index row (key_bucket = transaction_id / 1000)",
        "SELECT day, happened_at, kafka_partition, kafka_offset, kafka_timestamp,\n"
        "       resent_kafka_offset, resent_kafka_timestamp\n"
        f"  FROM {{keyspace}}.{cql.RECEIPT_KEYS_TABLE} WHERE operation_id = {{store}} "
        "AND vendor_fiscal_module = {device}\n   AND key_bucket = {bucket} "
        "AND transaction_id = {transaction};",
    ),
    Recipe(
        "the speed layer's last micro-batches",
        "SELECT batch_id, finished_at, input_rows, kafka_lag, valid_rows, invalid_rows,\n"
        "       resends_absorbed, conflicts\n"
        f"  FROM {{keyspace}}.{cql.SPEED_PROGRESS_TABLE} "
        "WHERE query_name = 'pos-speed-views' LIMIT 5;",
    ),
    Recipe(
        "every store's speed windows of a day (SAI index on day)",
        "SELECT operation_id, window_start, receipt_count, revenue\n"
        f"  FROM {{keyspace}}.{cql.AGG_SPEED_TABLE} WHERE day = '{{day}}';",
    ),
)

EXAMPLE: dict[str, Any] = {
    "keyspace": "pos",
    "store": 101,
    "day": "2026-03-02",
    "version": "d12-5f3c9a1e-20260228T0000Z-20260302T0900Z",
    "topic": "pos.transactions",
    "partition": 0,
    "device": 7,
    "transaction": 42,
}


def _filled(values: dict[str, Any]) -> dict[str, Any]:
    """`values` and the receipt_keys partition (key bucket) of its receipt number."""
    return {**values, "bucket": int(values["transaction"]) // cql.KEY_BUCKET_SIZE}


def statements(values: dict[str, Any]) -> list[str]:
    return [r.cql.format(**_filled(values)) for r in RECIPES]


def markdown(values: dict[str, Any] | None = None) -> str:
    """The cookbook as one ```sql block (what docs/serving.md shows, with EXAMPLE values)."""
    values = _filled(values or EXAMPLE)
    body = "\n".join(f"-- {r.title}\n{r.cql.format(**values)}" for r in RECIPES)
    return f"```sql\n{body}\n```"
