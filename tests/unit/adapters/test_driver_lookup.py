"""Values the CQL driver returns, as Spark's createDataFrame takes them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from cassandra.util import Date, OrderedMap, SortedSet

from pos_lambda.adapters.driver_lookup import spark_value


def test_a_naive_utc_timestamp_becomes_an_instant() -> None:
    # The driver returns UTC without a zone; Spark would read it in the local zone.
    got = spark_value(datetime(2026, 3, 29, 1, 30, 0, 123000))
    assert got == datetime(2026, 3, 29, 1, 30, 0, 123000, tzinfo=UTC)
    assert got.tzinfo is UTC


def test_a_cql_date_becomes_a_python_date() -> None:
    assert spark_value(Date(date(2026, 3, 2))) == date(2026, 3, 2)


def test_a_map_becomes_a_dict_and_a_set_a_list() -> None:
    applied = OrderedMap([(0, 41), (3, 7)])  # applied_offsets: partition -> offset
    assert spark_value(applied) == {0: 41, 3: 7}
    assert spark_value(SortedSet([3, 1])) == [1, 3]


def test_other_values_pass_unchanged() -> None:
    for value in ("x", 7, 2**63 - 1, Decimal("19999999999980000.00"), True, None):
        assert spark_value(value) == value


def test_keys_are_grouped_by_partition_each_value_once_in_bounded_lists() -> None:
    from pos_lambda.adapters.driver_lookup import by_partition

    keys = [(1, 2, 7, 10), (1, 2, 7, 11), (1, 3, 7, 10), (1, 2, 7, 10), (1, 2, 7, 12)]
    assert by_partition(keys) == [(1, 2, 7, [10, 11, 12]), (1, 3, 7, [10])]
    assert by_partition(keys, max_in=2) == [(1, 2, 7, [10, 11]), (1, 2, 7, [12]), (1, 3, 7, [10])]
    assert by_partition([]) == []
