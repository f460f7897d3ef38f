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

from pos_lambda.adapters.driver_writes import (
    MAX_BATCH_BYTES,
    OthersFirst,
    Outcome,
    _has_instant,
    cql_value,
    execute_resending_timeouts,
    partition_batches,
    value_bytes,
)

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


def test_a_partitions_rows_are_batched_by_count_in_order_of_first_appearance() -> None:
    rows = [("a", n) for n in range(250)] + [("b", 0), ("a", 250)]
    batches = partition_batches(rows, [0])
    assert [(b[0], len(b)) for b in batches] == [
        (("a", 0), 100), (("a", 100), 100), (("a", 200), 51), (("b", 0), 1),
    ]  # fmt: skip


def test_large_values_are_batched_by_bytes_however_few_the_rows() -> None:
    # 60 dead letters of 300 KB in one partition were one 18 MB request before.
    assert MAX_BATCH_BYTES == 524_288
    huge = [("t", 0, n, b"j" * 300_000) for n in range(60)]
    assert [len(b) for b in partition_batches(huge, [0, 1])] == [1] * 60
    big = [("t", 0, n, b"j" * 200_000) for n in range(5)]
    assert [len(b) for b in partition_batches(big, [0, 1])] == [2, 2, 1]
    # A row over the limit on its own still goes (alone): rows are bounded upstream.
    assert [len(b) for b in partition_batches([("t", b"j" * 600_000), ("t", b"")], [0])] == [1, 1]


def test_value_bytes_counts_payloads_and_a_fixed_size_per_number() -> None:
    assert value_bytes(b"abc") == 7
    assert value_bytes("é") == 6  # two UTF-8 bytes
    assert value_bytes(None) == 4
    assert value_bytes(2**62) == 12
    assert value_bytes(Decimal("123.45")) == 17
    assert value_bytes({1: "ab"}) == 4 + 12 + 6
    assert value_bytes([("tea", Decimal("1.5"), 2)]) == 4 + (4 + 7 + 14 + 12)


class _Statement:
    def __init__(self, idempotent: bool) -> None:
        self.is_idempotent = idempotent


class _Cassandra:
    """Stands in for execute_concurrent: each request's outcome from a script, per
    attempt; records what was sent, and whether as once-only writes."""

    def __init__(self, failures: list[dict[str, Exception]]) -> None:
        self.failures = failures  # attempt n: {request name: the error it meets}
        self.sent: list[tuple[list[str], bool]] = []
        self.avoided: list[frozenset[str]] = []  # the hosts each attempt coordinates last

    def execute(
        self, requests: list[tuple[_Statement, str]], once_only: bool, avoid: frozenset[str]
    ) -> list[Outcome]:
        attempt = self.failures[len(self.sent)] if len(self.sent) < len(self.failures) else {}
        self.sent.append(([name for _, name in requests], once_only))
        self.avoided.append(avoid)
        return [(name not in attempt, attempt.get(name, "ok")) for _, name in requests]


def _requests(idempotent: bool) -> list[tuple[_Statement, str]]:
    statement = _Statement(idempotent)
    return [(statement, name) for name in ("r1", "r2", "r3")]


def test_a_list_write_that_timed_out_is_sent_again_alone_as_a_new_request() -> None:
    from cassandra import OperationTimedOut

    cassandra = _Cassandra([{"r2": OperationTimedOut("frozen")}, {}])
    execute_resending_timeouts(cassandra.execute, _requests(idempotent=False))
    assert cassandra.sent == [(["r1", "r2", "r3"], True), (["r2"], True)]


def test_a_list_write_that_times_out_every_time_fails_the_micro_batch() -> None:
    from cassandra import OperationTimedOut

    cassandra = _Cassandra(
        [{"r3": OperationTimedOut("frozen", last_host=host)} for host in ("h1", "h2", "h3")]
    )
    with pytest.raises(OperationTimedOut):
        execute_resending_timeouts(cassandra.execute, _requests(idempotent=False), attempts=3)
    assert cassandra.sent == [(["r1", "r2", "r3"], True), (["r3"], True), (["r3"], True)]
    # Each resend is coordinated by a host that has not timed out yet, where there is one.
    assert cassandra.avoided == [frozenset(), {"h1"}, {"h1", "h2"}]


class _Plan:
    def make_query_plan(self, keyspace: object = None, query: object = None) -> list[str]:
        return ["primary", "second", "third"]

    def distance(self, host: str) -> str:
        return f"local {host}"


def test_a_resend_goes_to_the_replicas_that_did_not_time_out_first() -> None:
    assert OthersFirst(_Plan(), frozenset({"primary"})).make_query_plan() == [
        "second", "third", "primary",
    ]  # fmt: skip
    everyone = frozenset({"primary", "second", "third"})
    assert OthersFirst(_Plan(), everyone).make_query_plan() == ["primary", "second", "third"]
    assert OthersFirst(_Plan(), frozenset()).distance("x") == "local x"  # the child's


def test_a_speculated_write_is_not_sent_again_after_its_timeout() -> None:
    from cassandra import OperationTimedOut

    cassandra = _Cassandra([{"r1": OperationTimedOut("all replicas silent")}])
    with pytest.raises(OperationTimedOut):
        execute_resending_timeouts(cassandra.execute, _requests(idempotent=True))
    assert cassandra.sent == [(["r1", "r2", "r3"], False)]


def test_a_failure_other_than_a_client_timeout_is_raised_at_once() -> None:
    from cassandra import OperationTimedOut, Unavailable

    unavailable = Unavailable("2 of 3 replicas down")
    cassandra = _Cassandra([{"r1": OperationTimedOut("frozen"), "r2": unavailable}])
    with pytest.raises(Unavailable):
        execute_resending_timeouts(cassandra.execute, _requests(idempotent=False))
    assert len(cassandra.sent) == 1
