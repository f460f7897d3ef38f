"""Stored rows by key, read with a CQL session of the Spark driver, as a DataFrame.

A micro-batch of a few receipts needs a few stored rows: its receipts' `receipt_keys`
rows and its store-days' `agg_15m_speed` rows. Through the Spark connector each such
read is a join with Cassandra that Spark plans and runs as jobs of its own, a fixed
cost whatever the number of keys. Read here instead, with one prepared CQL query per
key from the driver process, the rows become a local relation that the micro-batch's
next Spark job reads without a job of its own (measured: docs/speed-performance.md).
Backlogs keep the connector's reads (`adapters.cassandra.lookup`): their keys are too
many to pass through the driver.

The DataFrame has the table's schema as the connector reads it, so the plans that use
it cannot tell the two reads apart.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from adapters import cassandra

# Queries in flight at once; a micro-batch read this way brings a few thousand keys at most.
CONCURRENT_READS = 64


def spark_value(value: Any) -> Any:
    """A cassandra-driver value as `createDataFrame` takes it for the connector's type."""
    from cassandra.util import Date, SortedSet

    if isinstance(value, dt.datetime):
        # The driver returns a timestamp as a naive UTC datetime, which Spark would read
        # in the driver process's local time zone.
        return value.replace(tzinfo=dt.UTC)
    if isinstance(value, Date):
        return value.date()
    if isinstance(value, Mapping):  # the driver's OrderedMapSerializedKey
        return {k: spark_value(v) for k, v in value.items()}
    if isinstance(value, SortedSet | list):
        return [spark_value(v) for v in value]
    return value


def local_frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: StructType) -> DataFrame:
    """`rows` as a DataFrame over a local relation: plans read it in the driver.

    `createDataFrame` of a list of tuples parallelizes pickled rows that a Python worker
    re-serializes in a Spark job of their own (two tasks; ~100 ms of a 10-record
    micro-batch's time, measured). From pandas, with Arrow
    (`spark.sql.execution.arrow.pyspark.enabled`, infra/spark.py), Spark builds a local
    relation instead, read where the plan needs it. The columns are objects, so that
    Python's ints, decimals and instants reach Arrow as they are: pandas would
    otherwise store a bigint column with a null as float64 and round its large values.
    """
    import pandas as pd

    columns = pd.DataFrame(rows, columns=schema.fieldNames(), dtype=object)
    return spark.createDataFrame(columns, schema)


@dataclass
class DriverLookup:
    """Reads rows of the keyspace's tables by key (prepared once per table and key)."""

    spark: SparkSession
    session: Any  # a cassandra-driver Session at the read consistency level
    keyspace: str
    _statements: dict[tuple[Any, ...], tuple[Any, StructType]] = field(default_factory=dict)

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        """`columns` of the rows of `table` whose `key_columns` equal one of `keys`."""
        from cassandra.concurrent import execute_concurrent_with_args

        statement, schema = self._statement(table, key_columns, columns)
        results = execute_concurrent_with_args(
            self.session, statement, list(keys), concurrency=CONCURRENT_READS
        )
        found = [tuple(map(spark_value, row)) for _, rows in results for row in rows]
        return local_frame(self.spark, found, schema)

    def _statement(
        self, table: str, key_columns: tuple[str, ...], columns: tuple[str, ...]
    ) -> tuple[Any, StructType]:
        key = (table, key_columns, columns)
        if key not in self._statements:
            where = " AND ".join(f"{c} = ?" for c in key_columns)
            query = f"SELECT {', '.join(columns)} FROM {self.keyspace}.{table} WHERE {where}"
            read = cassandra.read_table(self.spark, self.keyspace, table).schema
            schema = StructType([read[c] for c in columns])
            self._statements[key] = (self.session.prepare(query), schema)
        return self._statements[key]
