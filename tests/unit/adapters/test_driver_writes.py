"""The driver's writes: collected Spark values as cassandra-driver binds them (pure)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from cassandra.cqltypes import (
    DateType,
    DecimalType,
    Int32Type,
    ListType,
    LongType,
    MapType,
    UserType,
    UTF8Type,
)
from pyspark.sql import Row
from pyspark.sql import types as T

from adapters.driver_writes import _has_instant, cql_value, partition_batches

LINE_ITEM = UserType.make_udt_class(
    "pos", "line_item", ["title", "price", "amount"], [UTF8Type, DecimalType, Int32Type]
)


def test_a_struct_becomes_a_tuple_in_the_user_types_field_order_by_name() -> None:
    # Spark's struct has its fields in another order than the user type.
    items = [Row(amount=2, title="tea", price=Decimal("1.50")), None]
    assert cql_value(items, ListType.apply_parameters([LINE_ITEM])) == [
        ("tea", Decimal("1.50"), 2),
        None,
    ]


def test_maps_and_plain_values_pass_through_and_nulls_stay_null() -> None:
    offsets = MapType.apply_parameters([Int32Type, LongType])
    assert cql_value({0: 2**62 + 7}, offsets) == {0: 2**62 + 7}
    assert cql_value(None, offsets) is None
    assert cql_value(1_700_000_000_123, DateType) == 1_700_000_000_123  # epoch millis


def test_a_struct_missing_a_user_type_field_is_an_error() -> None:
    with pytest.raises(ValueError):
        cql_value(Row(title="tea", price=Decimal("1.50")), LINE_ITEM)


@pytest.mark.parametrize(
    ("kind", "nested"),
    [
        (T.TimestampType(), True),
        (T.ArrayType(T.StructType([T.StructField("at", T.TimestampType())])), True),
        (T.MapType(T.IntegerType(), T.TimestampType()), True),
        (T.ArrayType(T.StructType([T.StructField("price", T.DecimalType(12, 2))])), False),
        (T.DateType(), False),
    ],
)
def test_instants_are_found_at_any_depth(kind: T.DataType, nested: bool) -> None:
    assert _has_instant(kind) is nested


def test_rows_are_batched_by_partition_key_in_order_of_first_appearance() -> None:
    # (store, day, receipt): the partition key is the first two values.
    rows = [(1, "d1", 10), (2, "d1", 11), (1, "d1", 12), (1, "d2", 13), (2, "d1", 14)]
    assert partition_batches(rows, key_at=[0, 1]) == [
        [(1, "d1", 10), (1, "d1", 12)],
        [(2, "d1", 11), (2, "d1", 14)],
        [(1, "d2", 13)],
    ]


def test_a_partitions_rows_are_split_into_batches_of_at_most_max_rows() -> None:
    rows = [(7, n) for n in range(5)] + [(8, 0)]
    assert partition_batches(rows, key_at=[0], max_rows=2) == [
        [(7, 0), (7, 1)],
        [(7, 2), (7, 3)],
        [(7, 4)],
        [(8, 0)],
    ]
    assert partition_batches([], key_at=[0]) == []
