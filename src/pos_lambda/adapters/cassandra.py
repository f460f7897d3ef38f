"""Cassandra adapter for Spark jobs (Spark Cassandra Connector): one place for its options.

Writes are upserts by primary key: the connector turns every row into an INSERT,
which Cassandra applies as last-write-wins per cell. That is what makes a replayed
micro-batch harmless: it rewrites the same keys with the same absolute values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

FORMAT = "org.apache.spark.sql.cassandra"


def read_table(
    spark: SparkSession, keyspace: str, table: str, by_partition_key: bool = False
) -> DataFrame:
    """The table as a DataFrame.

    `by_partition_key`: the caller joins it with a small set of partition keys; force
    the connector's direct join (one read per key) instead of a full scan, which its
    size heuristic picks for young tables and which grows with the table.
    """
    options = {"keyspace": keyspace, "table": table}
    if by_partition_key:
        options["directJoinSetting"] = "on"
    return spark.read.format(FORMAT).options(**options).load()


def lookup(
    spark: SparkSession, keyspace: str, table: str, keys: DataFrame, columns: tuple[str, ...]
) -> DataFrame:
    """The rows of `table` whose partition key is among `keys` (a small DataFrame).

    A direct join (one read per key): a micro-batch's cost does not grow with the table.
    """
    rows = read_table(spark, keyspace, table, by_partition_key=True)
    return rows.join(keys.distinct(), keys.columns, "inner").select(*columns)


def upsert(df: DataFrame, keyspace: str, table: str, columns: tuple[str, ...] = ()) -> None:
    """Write `df` (or just `columns` of it) as INSERTs: upserts by primary key."""
    if columns:
        df = df.select(*by_name(columns))
    (
        df.write.format(FORMAT)
        .options(keyspace=keyspace, table=table)
        .mode("append")  # "append" = INSERT = upsert; "overwrite" would TRUNCATE the table
        .save()
    )


@cache
def by_name(columns: tuple[str, ...]) -> tuple[Column, ...]:
    """The named columns, built once per driver: each name given to `select` as text
    costs py4j round trips, one of them a class lookup through every jar on the driver's
    class path (a 1,600-record speed micro-batch's writes selected ~140 names)."""
    return tuple(F.col(c) for c in columns)


@dataclass(frozen=True)
class Target:
    """Where rows of a DataFrame go: `columns` (all when empty) of the rows `where`
    selects (all when None) into `table`."""

    table: str
    columns: tuple[str, ...] = ()
    where: Column | None = None


def upsert_each(
    df: DataFrame,
    keyspace: str,
    targets: Sequence[Target],
    written: Callable[[str], None] = lambda table: None,
) -> None:
    """Each target's rows of `df` upserted into its table, in order; `written(table)`
    once a table is written."""
    for target in targets:
        rows = df if target.where is None else df.where(target.where)
        upsert(rows, keyspace, target.table, target.columns)
        written(target.table)


def _visible(spark: SparkSession, keyspace: str, table: str) -> bool:
    try:
        read_table(spark, keyspace, table).schema  # noqa: B018 - resolving is the check
        return True
    except Exception as exc:
        if "Couldn't find" in str(exc):
            return False
        raise


def await_tables(
    spark: SparkSession, keyspace: str, tables: list[str], timeout: float = 30.0
) -> None:
    """Block until the connector's schema metadata shows these tables.

    The connector learns about new keyspaces and tables through the driver's
    debounced schema events, a moment after CREATE returns; a job started right after
    `pos-infra schema` would otherwise fail its first write.
    """
    from pos_lambda.adapters.service import ServiceError, wait_for

    for table in tables:
        if not wait_for(partial(_visible, spark, keyspace, table), timeout, interval=0.5):
            raise ServiceError(
                f"Cassandra table {keyspace}.{table} not found: apply the schema with "
                "`make schema` (or `make up`) and check POS_CASSANDRA_KEYSPACE."
            )


def close_idle_sessions(spark: SparkSession) -> None:
    """Close the connector's cached CQL sessions that no job uses (in this driver's JVM).

    The connector keeps a released session open for an hour
    (spark.cassandra.connection.keepAliveMS) to reuse it. One that lived through a
    Cassandra restart could block for good in a schema refresh when a query starts on it
    again. So a driver that restarts a failed query in place (speed_layer/in_place.py)
    closes them first, and the query opens fresh ones.
    """
    jvm: Any = spark.sparkContext._jvm
    jvm.com.datastax.spark.connector.cql.CassandraConnector.evictCache()
