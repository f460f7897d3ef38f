from __future__ import annotations

import pytest

from pos_lambda.adapters.schema_apply import TableShape, migrations, table_shape
from pos_lambda.adapters.service import ServiceError
from pos_lambda.schemas import cql

PROGRESS = """CREATE TABLE IF NOT EXISTS pos.speed_progress (
  query_name text,
  batch_id bigint,
  rows bigint,
  conflicts bigint,
  PRIMARY KEY ((query_name), batch_id)
) WITH CLUSTERING ORDER BY (batch_id DESC)"""


def test_a_create_table_statement_is_read_as_columns_and_key() -> None:
    assert table_shape(PROGRESS) == TableShape(
        "pos",
        "speed_progress",
        {"query_name": "text", "batch_id": "bigint", "rows": "bigint", "conflicts": "bigint"},
        ("query_name", "batch_id"),
    )
    inline = table_shape(
        "CREATE TABLE IF NOT EXISTS k.alerts (\n  alert_id text PRIMARY KEY,\n  "
        "rule text,\n  detail map<text, text>\n)"
    )
    assert inline is not None
    assert (inline.primary_key, inline.columns["detail"]) == (("alert_id",), "map<text, text>")
    assert table_shape("CREATE TYPE IF NOT EXISTS k.line_item (title text)") is None


def test_every_table_of_the_schema_parses_with_its_key_among_its_columns() -> None:
    shapes = [s for s in map(table_shape, cql.ddl("pos")) if s is not None]
    assert {s.name for s in shapes} >= {cql.RAW_TABLE, cql.BATCH_POINTER_TABLE}
    for s in shapes:
        assert s.primary_key and set(s.primary_key) <= set(s.columns), s.name
    pointer = next(s for s in shapes if s.name == cql.BATCH_POINTER_TABLE)
    assert pointer.columns["horizon"] == "timestamp STATIC"


def test_a_table_from_an_older_version_gains_its_missing_columns() -> None:
    shape = table_shape(PROGRESS)
    assert shape is not None
    old = {"query_name": "partition_key", "batch_id": "clustering", "rows": "regular"}
    assert migrations(shape, old) == ["ALTER TABLE pos.speed_progress ADD conflicts bigint"]
    assert migrations(shape, {**old, "conflicts": "regular"}) == []
    assert migrations(shape, {}) == []  # a new table: CREATE makes it whole


def test_a_changed_primary_key_is_refused_with_what_to_do() -> None:
    shape = table_shape(PROGRESS)
    assert shape is not None
    with pytest.raises(ServiceError, match=r"DROP TABLE pos\.speed_progress"):
        migrations(shape, {"query_name": "partition_key", "rows": "regular"})


def test_dead_letters_from_before_value_prefixes_gain_length_and_hash_columns() -> None:
    [shape] = [
        s
        for s in map(table_shape, cql.ddl("pos"))
        if s is not None and s.name == cql.DEAD_LETTERS_TABLE
    ]
    old = {
        "kafka_topic": "partition_key", "kafka_partition": "partition_key",
        "kafka_offset": "clustering", "kafka_timestamp": "regular", "kafka_key": "regular",
        "raw_value": "regular", "reason": "regular", "detail": "regular",
    }  # fmt: skip
    assert migrations(shape, old) == [
        "ALTER TABLE pos.dead_letters ADD value_length int",
        "ALTER TABLE pos.dead_letters ADD value_sha256 text",
        # ... and, since receipt status, the natural key their value claims.
        "ALTER TABLE pos.dead_letters ADD operation_id int",
        "ALTER TABLE pos.dead_letters ADD vendor_fiscal_module int",
        "ALTER TABLE pos.dead_letters ADD transaction_id bigint",
    ]


def test_receipt_keys_from_before_receipt_status_gain_the_last_resends_columns() -> None:
    [shape] = [
        s
        for s in map(table_shape, cql.ddl("pos"))
        if s is not None and s.name == cql.RECEIPT_KEYS_TABLE
    ]
    keys = {"operation_id", "vendor_fiscal_module", "key_bucket"}
    old = {
        c: "partition_key" if c in keys else "clustering" if c == "transaction_id" else "regular"
        for c in shape.columns
        if not c.startswith("resent_")
    }
    assert migrations(shape, old) == [
        "ALTER TABLE pos.receipt_keys ADD resent_kafka_partition int",
        "ALTER TABLE pos.receipt_keys ADD resent_kafka_offset bigint",
        "ALTER TABLE pos.receipt_keys ADD resent_kafka_timestamp timestamp",
    ]
    # The index on the claimed receipt number is made if missing, never twice.
    assert (
        "CREATE INDEX IF NOT EXISTS dead_letters_by_transaction_id ON pos.dead_letters "
        "(transaction_id) USING 'sai'"
    ) in cql.ddl("pos")
