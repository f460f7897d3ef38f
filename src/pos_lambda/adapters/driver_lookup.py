"""Stored rows by key, read with a CQL session of the Spark driver, as a DataFrame.

A micro-batch of a few receipts needs a few stored rows: its receipts' `receipt_keys`
rows and its store-days' `agg_15m_speed` rows. Through the Spark connector each such
read is a join with Cassandra that Spark plans and runs as jobs of its own, a fixed
cost whatever the number of keys. Read here instead, with prepared CQL queries from
the driver process, the rows become a local relation that the micro-batch's next Spark
job reads without a job of its own (measured: docs/speed-performance.md). Keys that
share a partition are read in one query (`IN` on the key's last column): a device's
receipts share a `receipt_keys` partition, and one query per receipt took 1.6 s of a
3,500-record micro-batch. Backlogs keep the connector's reads
(`pos_lambda.adapters.cassandra.lookup`): their keys are too many to pass through the driver.

The DataFrame has the table's schema as the connector reads it, so the plans that use
it cannot tell the two reads apart.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from pos_lambda.adapters import cassandra, cassandra_client

# Queries in flight at once; a micro-batch read this way brings a few thousand keys at most.
CONCURRENT_READS = 64
# Values of one `IN` list at most: a receipt_keys partition holds KEY_BUCKET_SIZE
# (1,000) receipt numbers; longer lists are split, so no single read grows unbounded.
MAX_IN = 500


def by_partition(keys: Iterable[Sequence[Any]], max_in: int = MAX_IN) -> list[tuple[Any, ...]]:
    """Keys grouped by all but their last value: (*prefix, [last values]) per prefix, in
    lists of at most `max_in`, each value once, in order of first appearance."""
    groups: dict[tuple[Any, ...], dict[Any, None]] = {}
    for key in keys:
        groups.setdefault(tuple(key[:-1]), {})[key[-1]] = None
    bound: list[tuple[Any, ...]] = []
    for prefix, lasts in groups.items():
        values = list(lasts)
        bound.extend((*prefix, values[i : i + max_in]) for i in range(0, len(values), max_in))
    return bound


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
    (`spark.sql.execution.arrow.pyspark.enabled`, adapters/spark_session.py), Spark builds a local
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
    _statements: dict[tuple[Any, ...], tuple[Any, StructType, bool]] = field(default_factory=dict)

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        """`columns` of the rows of `table` whose `key_columns` equal one of `keys`.

        `key_columns`: the table's partition key, or it and the first clustering column;
        then keys in one partition are read by one query.
        """
        from cassandra.concurrent import execute_concurrent_with_args

        statement, schema, grouped = self._statement(table, key_columns, columns)
        bound = by_partition(keys) if grouped else list(keys)
        results = execute_concurrent_with_args(
            self.session, statement, bound, concurrency=CONCURRENT_READS
        )
        found = [tuple(map(spark_value, row)) for _, rows in results for row in rows]
        return local_frame(self.spark, found, schema)

    def _statement(
        self, table: str, key_columns: tuple[str, ...], columns: tuple[str, ...]
    ) -> tuple[Any, StructType, bool]:
        """The prepared query, the rows' Spark schema, and whether it takes keys grouped
        by partition (`by_partition`: the key's last column is a clustering column)."""
        key = (table, key_columns, columns)
        if key not in self._statements:
            grouped = self._grouped(table, key_columns)
            equal = key_columns[:-1] if grouped else key_columns
            where = " AND ".join(
                [f"{c} = ?" for c in equal] + ([f"{key_columns[-1]} IN ?"] if grouped else [])
            )
            query = f"SELECT {', '.join(columns)} FROM {self.keyspace}.{table} WHERE {where}"
            read = cassandra.read_table(self.spark, self.keyspace, table).schema
            schema = StructType([read[c] for c in columns])
            self._statements[key] = (
                cassandra_client.prepare_idempotent(self.session, query),
                schema,
                grouped,
            )
        return self._statements[key]

    def _grouped(self, table: str, key_columns: tuple[str, ...]) -> bool:
        """Whether `key_columns` go one column past the table's partition key (the schema
        Cassandra reports, not a copy of it here)."""
        meta = self.session.cluster.metadata.keyspaces[self.keyspace].tables[table]
        partition = tuple(c.name for c in meta.partition_key)
        if key_columns == partition:
            return False
        clustering = tuple(c.name for c in meta.clustering_key)
        if key_columns == (*partition, *clustering[:1]):
            return True
        raise ValueError(
            f"{table} is read by its partition key {partition}, or it and its first "
            f"clustering column {clustering[:1]}; not by {key_columns}"
        )
