"""The serving views in memory (tests/support/memory_views.py) hold to the keyspace's DDL
and read as Cassandra does: what the unit tests of `Serving` stand on."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from pos_lambda.schemas import cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving.model import AggregateRow, DayVersion, Pointer
from pos_lambda.serving.views import STATEMENTS
from tests.support.memory_views import MemoryKeyspace, Select, memory_views

DAY = date(2026, 3, 2)


def at(h: int, m: int = 0) -> datetime:
    return datetime(2026, 3, 2, h, m, tzinfo=UTC)


def test_every_serving_statement_reads_tables_and_columns_the_ddl_declares() -> None:
    keyspace = MemoryKeyspace()
    assert set(keyspace.prepared) == set(STATEMENTS)
    tables = keyspace.tables
    with pytest.raises(ValueError, match=r"has no columns \['revenu'\]"):
        Select.prepare(f"SELECT revenu FROM {cql.AGG_SPEED_TABLE} WHERE day = ?", tables)
    # late_count is neither a key nor SAI-indexed: Cassandra wants ALLOW FILTERING.
    with pytest.raises(ValueError, match="need an index or ALLOW FILTERING"):
        Select.prepare(f"SELECT day FROM {cql.AGG_SPEED_TABLE} WHERE late_count = ?", tables)


def test_writes_hold_to_the_ddl() -> None:
    keyspace = MemoryKeyspace()
    with pytest.raises(ValueError, match=r"has no columns \['revenu'\]"):
        keyspace.insert(cql.AGG_SPEED_TABLE, operation_id=1, day=DAY, revenu=Decimal(1))
    with pytest.raises(ValueError, match="the partition key"):
        keyspace.insert(cql.AGG_SPEED_TABLE, operation_id=1, window_start=at(9))
    with pytest.raises(ValueError, match="a null in the clustering key"):
        keyspace.insert(cql.AGG_SPEED_TABLE, operation_id=1, day=DAY, receipt_count=1)


def test_rows_come_back_as_the_driver_returns_them_and_the_adapter_maps_them() -> None:
    keyspace = MemoryKeyspace()
    late = AggregateRow(1, at(9, 15), Aggregate(2, 3, Decimal("4.50"), 0))
    early = AggregateRow(1, at(9), Aggregate(1, 1, Decimal("1.90"), 1))
    keyspace.aggregates(speed=[late, early])
    [row, _] = keyspace.rows("speed_day", 1, DAY)
    assert row.window_start == datetime(2026, 3, 2, 9)  # naive UTC, as the driver's
    views = memory_views(keyspace)
    # In clustering order (window_start ASC), timezone-aware again.
    assert views.store_days(1, [DAY], Pointer(None)) == ([], [early, late])
    assert views.store_known(1) and not views.store_known(2)


def test_static_cells_and_descending_clustering_read_as_cassandras() -> None:
    keyspace = MemoryKeyspace()
    keyspace.pointer(Pointer(at(12), {DAY: DayVersion(DAY, "v1", at(12), "gen-a", 7)}))
    # A later commit's static cells (horizon, generation) are every day row's.
    keyspace.insert(cql.BATCH_POINTER_TABLE, view_name="batch", horizon=at(13), generation="g")
    pointer = memory_views(keyspace).pointer(DAY, DAY)
    assert pointer.horizon == at(13)
    assert pointer.days[DAY] == DayVersion(DAY, "v1", at(12), "g", 7)
    for n in (1, 3, 2):
        keyspace.insert(cql.SPEED_PROGRESS_TABLE, query_name="q", batch_id=n)
    # batch_id DESC: LIMIT 1 reads the newest micro-batch.
    assert [r.batch_id for r in keyspace.rows("speed_progress", "q")] == [3]


def test_pages_carry_on_where_the_last_one_stopped() -> None:
    keyspace = MemoryKeyspace()
    keyspace.aggregates(
        speed=[AggregateRow(1, at(h), Aggregate(1, 1, Decimal(1), 0)) for h in range(5)]
    )
    first, state = keyspace.page("speed_day", (1, DAY), 3, None)
    rest, end = keyspace.page("speed_day", (1, DAY), 3, state)
    assert ([r.window_start.hour for r in first + rest], end) == ([0, 1, 2, 3, 4], None)


def test_no_host_available_is_said_whether_the_driver_gives_hosts_or_errors() -> None:
    from cassandra.cluster import NoHostAvailable

    from pos_lambda.serving.views import unreachable_reasons

    # Connecting with a keyspace that does not exist: a list of hosts, not a dict.
    missing = NoHostAvailable("Unable to connect to any servers using keyspace 'pos'", ["h1"])
    assert unreachable_reasons(missing) == "Unable to connect to any servers using keyspace 'pos'"
    down = NoHostAvailable("Unable to connect", {"h1": OSError("refused")})
    assert unreachable_reasons(down) == "h1: refused"
