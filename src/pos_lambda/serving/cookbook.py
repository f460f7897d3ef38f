"""The CQL cookbook: the cqlsh query for each view, kept here once.

docs/serving.md shows `markdown()` (a unit test checks that it does, verbatim) and an
integration test runs every recipe against the real Cassandra with real data, so the
documented queries cannot rot (the views' recipes in tests/integration/test_serving.py,
the store registry's and local day's in tests/integration/test_local_days.py, where the
stores table is seeded). `pos-serve cookbook --store 101 --day 2026-03-02` prints
them for your own keyspace, store and day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from pos_lambda.schemas import cql
from pos_lambda.stores.local_day import local_day_bounds
from pos_lambda.stores.model import check_zone


@dataclass(frozen=True)
class Recipe:
    title: str
    # str.format placeholders: keyspace, store, day, version, topic, partition, device,
    # transaction, zone, and from them: bucket (transaction), local_start, local_end,
    # utc_days (the local day's UTC window range and the UTC day partitions it overlaps)
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
        "the batch's conflicting copies of a store-day, where it answers (the pointer's "
        "generation; rows with master_version <= the day's delta_version)",
        "SELECT transaction_id, differs, revenue, winner_revenue, master_version\n"
        f"  FROM {{keyspace}}.{cql.CONFLICTS_BATCH_TABLE} WHERE operation_id = {{store}} "
        "AND winner_day = '{day}' AND version = '{generation}';",
    ),
    Recipe(
        "did we get every receipt? each device's numbers of a store-day and the ranges "
        "missing from them (the batch's gaps view, of the version the pointer names for the "
        "day; final once covered_until is the day's end)",
        "SELECT vendor_fiscal_module, first_number, last_number, receipt_count, missing_count,\n"
        "       missing, restarts, revenue\n"
        f"  FROM {{keyspace}}.{cql.GAPS_BATCH_TABLE} WHERE operation_id = {{store}} "
        "AND day = '{day}'\n   AND version = '{version}';",
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
        f"WHERE query_name = '{cql.SPEED_QUERY_OF_JOB['views']}' LIMIT 5;",
    ),
    Recipe(
        "every store's speed windows of a day (SAI index on day)",
        "SELECT operation_id, window_start, receipt_count, revenue\n"
        f"  FROM {{keyspace}}.{cql.AGG_SPEED_TABLE} WHERE day = '{{day}}';",
    ),
)

# Stores and local days (docs/serving.md, "Stores and local days"): a store's local day
# is the UTC window range [local_start, local_end), read from the UTC day partitions it
# overlaps; the batch answers those days' windows as the two steps above say.
LOCAL_DAY_RECIPES = (
    Recipe(
        "the store registry: every store's time zone and opening hours",
        "SELECT operation_id, name, time_zone, opening_hours\n"
        f"  FROM {{keyspace}}.{cql.STORES_TABLE};",
    ),
    Recipe(
        "one store's zone and hours (its local day: local midnight to local midnight)",
        "SELECT name, time_zone, opening_hours\n"
        f"  FROM {{keyspace}}.{cql.STORES_TABLE} WHERE operation_id = {{store}};",
    ),
    Recipe(
        "a store's local day ({day} in {zone}) as its UTC windows, speed view",
        "SELECT day, window_start, receipt_count, item_quantity, revenue, late_count\n"
        f"  FROM {{keyspace}}.{cql.AGG_SPEED_TABLE} WHERE operation_id = {{store}} "
        "AND day IN ({utc_days})\n"
        "   AND window_start >= '{local_start}' AND window_start < '{local_end}';",
    ),
    Recipe(
        "that local day's raw receipts, speed view (by happened_at, same UTC range)",
        "SELECT happened_at, vendor_fiscal_module, transaction_id, item_quantity, revenue\n"
        f"  FROM {{keyspace}}.{cql.RAW_TABLE} WHERE operation_id = {{store}} "
        "AND day IN ({utc_days})\n"
        "   AND happened_at >= '{local_start}' AND happened_at < '{local_end}';",
    ),
    Recipe(
        "the batch versions of those UTC days (then step 2 above per day, same window range)",
        "SELECT day, version, covered_until, horizon\n"
        f"  FROM {{keyspace}}.{cql.BATCH_POINTER_TABLE} WHERE view_name = 'batch' "
        "AND day IN ({utc_days});",
    ),
)
ALL_RECIPES = RECIPES + LOCAL_DAY_RECIPES

EXAMPLE: dict[str, Any] = {
    "keyspace": "pos",
    "store": 101,
    "day": "2026-03-02",
    "version": "d12-5f3c9a1e-20260228T0000Z-20260302T0900Z",
    "generation": "g12-5f3c9a1e",
    "topic": "pos.transactions",
    "partition": 0,
    "device": 7,
    "transaction": 42,
    "zone": "Europe/Bratislava",  # store 101's, as the simulator seeds it
}


def _filled(values: dict[str, Any]) -> dict[str, Any]:
    """`values` and what follows from them: the receipt_keys partition (key bucket) of its
    receipt number, and the UTC window range and day partitions of the local day.

    Raises `UnalignedDay` for a day of a zone that does not align to 15-minute windows
    and `StoreError` for an unknown zone."""
    # The views' recipes need no zone: values without one read the local day as UTC's.
    zone = check_zone(values.get("zone", "UTC"))
    start, end = local_day_bounds(date.fromisoformat(str(values["day"])), zone)
    last = (end - timedelta(microseconds=1)).date()
    days = [start.date() + timedelta(days=n) for n in range((last - start.date()).days + 1)]
    return {
        **values,
        "bucket": int(values["transaction"]) // cql.KEY_BUCKET_SIZE,
        "local_start": f"{start:%Y-%m-%dT%H:%M:%SZ}",
        "local_end": f"{end:%Y-%m-%dT%H:%M:%SZ}",
        "utc_days": ", ".join(f"'{d.isoformat()}'" for d in days),
    }


def _text(recipe: Recipe, values: dict[str, Any]) -> str:
    return recipe.cql.format(**values)


def statements(values: dict[str, Any], recipes: tuple[Recipe, ...] = RECIPES) -> list[str]:
    filled = _filled(values)
    return [_text(r, filled) for r in recipes]


def markdown(values: dict[str, Any] | None = None) -> str:
    """The cookbook as one ```sql block (what docs/serving.md shows, with EXAMPLE values)."""
    values = _filled(values or EXAMPLE)
    body = "\n".join(f"-- {r.title.format(**values)}\n{_text(r, values)}" for r in ALL_RECIPES)
    return f"```sql\n{body}\n```"
