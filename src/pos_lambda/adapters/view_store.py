"""What the speed layer reads and writes of its views: the port and its two real adapters.

A views micro-batch reads stored rows by key (its receipts' `receipt_keys` rows, its
store-days' `agg_15m_speed` rows, the raw rows of the stored winners its conflicts
name) and upserts rows into tables, in order. `ViewStore` is that, and nothing else:

- `ConnectorStore`: the Spark Cassandra Connector (`pos_lambda.adapters.cassandra`):
  a direct join per read, a Spark job per written table. What backlogs need.
- `DriverStore`: a CQL session of the Spark driver (`pos_lambda.adapters.driver_lookup`,
  `pos_lambda.adapters.driver_writes`): reads and writes without a Spark job of their
  own, for micro-batches of a few receipts.
- `pos_lambda.adapters.memory_store.InMemoryViewStore`: the tables in a dict, for unit
  tests of the micro-batch (tests/unit/speed_layer) and benchmarks without Cassandra.

Which one a micro-batch uses is its own decision (`pos_lambda.speed_layer.batch_plan`).
The three are held to the same behaviour by tests/integration/test_view_store.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from pos_lambda.adapters import cassandra
from pos_lambda.adapters.cassandra import Target
from pos_lambda.adapters.driver_lookup import DriverLookup
from pos_lambda.adapters.driver_writes import DriverWriter


def _nothing(table: str) -> None:
    """The default `written`: nothing to do once a table is written."""


class ViewStore(Protocol):
    """Stored rows by key, and upserts by primary key (a row replaces the cells it
    writes of the row with the same primary key, as Cassandra's INSERT does)."""

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        """`columns` of the rows of `table` whose `key_columns` equal one of `keys`
        (values the driver holds: a micro-batch's collected keys)."""
        ...

    def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        """`columns` of the rows of `table` whose key equals a row of `keys`; the key is
        `keys`' columns: the table's partition key, or it and clustering columns."""
        ...

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = _nothing,
    ) -> None:
        """Each target's rows of `df` upserted into its table, in order; `written(table)`
        once a table is written."""
        ...


@dataclass(frozen=True)
class ConnectorStore:
    """The Spark Cassandra Connector's reads (direct joins) and writes (a Spark job each)."""

    spark: SparkSession
    keyspace: str

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        # The keys as a DataFrame typed as the table's key columns, for the direct join.
        read = cassandra.read_table(self.spark, self.keyspace, table).schema
        schema = StructType([read[c] for c in key_columns])
        return self.lookup(table, self.spark.createDataFrame(list(keys), schema), columns)

    def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        return cassandra.lookup(self.spark, self.keyspace, table, keys, columns)

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = _nothing,
    ) -> None:
        cassandra.upsert_each(df, self.keyspace, targets, written)


@dataclass(frozen=True)
class DriverStore:
    """Reads and writes with a CQL session of the Spark driver: the rows pass through
    the driver process, so only for a micro-batch's few."""

    reader: DriverLookup
    writer: DriverWriter

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        return self.reader.rows(table, key_columns, keys, columns)

    def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        # The keys collected to the driver, then read as `rows` reads them (by the
        # partition key, or it and the first clustering column).
        wanted = [tuple(k) for k in keys.distinct().collect()]
        return self.rows(table, tuple(keys.columns), wanted, columns)

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = _nothing,
    ) -> None:
        self.writer.upsert_each(df, targets, written)
