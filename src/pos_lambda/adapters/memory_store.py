"""A `ViewStore` (pos_lambda.adapters.view_store) in memory, for tests and benchmarks.

The speed layer's micro-batch reads stored rows and upserts new ones; with this store
it runs in a local Spark session, without Cassandra, so that its replays, its write
order and its choice between the driver's and the connector's paths can be unit-tested
(tests/unit/speed_layer/test_views_batch.py). It lives in the package, beside the real
adapters, so that benchmarks (bench/, which import the package, not the tests) can
use it as well; it needs nothing but Spark.

Its tables are those `pos_lambda.schemas.cql.table_ddl` creates, read from the DDL
itself: the primary key decides which row a write replaces (and a null in it is
refused, as Cassandra refuses it), the column types what a read returns, typed as the
connector reads them (a `decimal` as decimal(38,18), a user type as a struct). A write
sets the cells it names of the row with its primary key and leaves the others, as an
INSERT does; instants are kept to the millisecond, as Cassandra keeps them.
tests/integration/test_view_store.py holds it to the real adapters' behaviour.

Every read and write is logged as (path, "read" or "write", table, the key columns
read by or () for a write), in order; `via`
gives a view of the same tables that logs under another path name, so that a test
can hand the micro-batch a "driver" and a "connector" store and see which it used.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pos_lambda.adapters.cassandra import Target
from pos_lambda.schemas import cql

# The speed layer's tables: what its micro-batch reads and writes.
SPEED_TABLES = (
    cql.AGG_SPEED_TABLE,
    cql.RAW_TABLE,
    cql.RECEIPT_KEYS_TABLE,
    cql.CONFLICTS_TABLE,
    cql.DEAD_LETTERS_TABLE,
)
# CQL types as the Spark Cassandra Connector reads them.
_SCALARS: dict[str, DataType] = {
    "text": StringType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "decimal": DecimalType(38, 18),
    "double": DoubleType(),
    "timestamp": TimestampType(),
    "date": DateType(),
    "boolean": BooleanType(),
    "blob": BinaryType(),
}


@dataclass(frozen=True)
class Layout:
    """A table's Spark schema (as the connector reads it) and primary key."""

    schema: StructType
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*self.partition_key, *self.clustering)

    def check_key(self, table: str, key_columns: tuple[str, ...]) -> None:
        """Raise unless rows can be read by `key_columns`: the partition key, then
        clustering columns in order (what Cassandra serves without a scan)."""
        n = len(key_columns)
        if n < len(self.partition_key) or key_columns != self.primary_key[:n]:
            raise ValueError(
                f"{table} is read by its partition key {self.partition_key} and then its "
                f"clustering columns {self.clustering} in order; not by {key_columns}"
            )


def _split(text: str) -> list[str]:
    """`text` split at the commas outside <...> and (...), each part stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _named_body(statement: str) -> tuple[str, str]:
    """A CREATE statement's object name (without keyspace) and its outer (...) content."""
    head, _, rest = statement.partition("(")
    name = head.split()[-1].rsplit(".", 1)[-1]
    depth = 1
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return name, rest[:i]
    raise ValueError(f"unbalanced parentheses in {statement[:80]!r}")


def _inner(cql_type: str) -> str:
    return cql_type[cql_type.index("<") + 1 : cql_type.rindex(">")]


def spark_type(cql_type: str, types: Mapping[str, StructType]) -> DataType:
    """A CQL type as the connector reads it (`types`: the keyspace's user types)."""
    kind = cql_type.strip()
    if kind.startswith("frozen<"):
        return spark_type(_inner(kind), types)
    if kind.startswith(("list<", "set<")):
        return ArrayType(spark_type(_inner(kind), types))
    if kind.startswith("map<"):
        key, value = _split(_inner(kind))
        return MapType(spark_type(key, types), spark_type(value, types))
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind in types:
        return types[kind]
    raise ValueError(f"CQL type {kind!r} is not modelled here")


def layouts(tables: Iterable[str] = SPEED_TABLES) -> dict[str, Layout]:
    """The layouts of `tables`, read from the project's DDL (schemas/cql.py)."""
    wanted = set(tables)
    types: dict[str, StructType] = {}
    found: dict[str, Layout] = {}
    for statement in cql.table_ddl("ks"):
        if not statement.startswith(("CREATE TYPE", "CREATE TABLE")):
            continue  # an index: no rows of its own
        name, body = _named_body(statement)
        if statement.startswith("CREATE TYPE"):
            fields = [part.split(None, 1) for part in _split(body)]
            types[name] = StructType([StructField(n, spark_type(t, types)) for n, t in fields])
        elif name in wanted:
            found[name] = _layout(body, types)
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"no such tables in the DDL: {sorted(missing)}")
    return found


def _layout(body: str, types: Mapping[str, StructType]) -> Layout:
    columns: list[StructField] = []
    key: list[str] = []
    for part in _split(body):
        if part.startswith("PRIMARY KEY"):
            key = _split(_named_body(part)[1])
            continue
        name, kind = part.split(None, 1)
        if kind.endswith(" PRIMARY KEY"):
            kind, key = kind.removesuffix(" PRIMARY KEY"), [name]
        columns.append(StructField(name, spark_type(kind, types)))
    partition = tuple(_split(key[0].strip("()"))) if key[0].startswith("(") else (key[0],)
    return Layout(StructType(columns), partition, tuple(key[1:]))


def _stored(value: Any) -> Any:
    """A written value as Cassandra keeps it: an instant to the millisecond."""
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


class Call(NamedTuple):
    """A read or write of the store, as logged."""

    path: str  # the store's `via` name
    op: str  # "read" or "write"
    table: str
    by: tuple[str, ...]  # a read's key columns; () for a write


@dataclass
class _Tables:
    """What every view of one store shares: the rows, and the log of calls."""

    layouts: dict[str, Layout]
    rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]]
    log: list[Call] = field(default_factory=list)


def _nothing(table: str) -> None:
    """The default `written`: nothing to do once a table is written."""


class InMemoryViewStore:
    """A ViewStore over `tables` (the speed layer's by default), in memory."""

    def __init__(
        self,
        spark: SparkSession,
        tables: Iterable[str] = SPEED_TABLES,
        path: str = "memory",
        _shared: _Tables | None = None,
    ) -> None:
        self.spark = spark
        self.path = path
        if _shared is None:
            found = layouts(tables)
            _shared = _Tables(found, {name: {} for name in found})
        self._tables = _shared

    def via(self, path: str) -> InMemoryViewStore:
        """The same tables and log, its calls logged under `path`."""
        return InMemoryViewStore(self.spark, path=path, _shared=self._tables)

    @property
    def log(self) -> list[Call]:
        """Every call so far, in order: (path, "read" or "write", table, key columns)."""
        return list(self._tables.log)

    @property
    def writes(self) -> list[str]:
        """The tables written so far, in order (once per target written)."""
        return [call.table for call in self._tables.log if call.op == "write"]

    def table(self, name: str) -> list[dict[str, Any]]:
        """A copy of the rows `name` holds, in the order they were first written."""
        return [dict(row) for row in self._table(name).values()]

    def rows(
        self,
        table: str,
        key_columns: tuple[str, ...],
        keys: Iterable[tuple[Any, ...]],
        columns: tuple[str, ...],
    ) -> DataFrame:
        self._layout(table).check_key(table, key_columns)
        wanted = {tuple(map(_stored, k)) for k in keys}
        found = [
            row
            for row in self._table(table).values()
            if tuple(row.get(c) for c in key_columns) in wanted
        ]
        self._tables.log.append(Call(self.path, "read", table, key_columns))
        return self._frame(table, found, columns)

    def lookup(self, table: str, keys: DataFrame, columns: tuple[str, ...]) -> DataFrame:
        wanted = [tuple(k) for k in keys.distinct().collect()]
        return self.rows(table, tuple(keys.columns), wanted, columns)

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = _nothing,
    ) -> None:
        for target in targets:
            layout = self._layout(target.table)
            columns = target.columns or tuple(df.columns)
            unknown = [c for c in columns if c not in layout.schema.names]
            keyless = [c for c in layout.primary_key if c not in columns]
            if unknown or keyless:
                raise ValueError(
                    f"{target.table}: no columns {unknown}; primary key columns "
                    f"{keyless} not written"
                )
            rows = df if target.where is None else df.where(target.where)
            stored = self._table(target.table)
            for row in rows.select(*columns).collect():
                values = {c: _stored(v) for c, v in zip(columns, row, strict=True)}
                key = tuple(values[c] for c in layout.primary_key)
                if None in key:
                    raise ValueError(f"{target.table}: a null in the primary key {key}")
                stored.setdefault(key, {}).update(values)
            self._tables.log.append(Call(self.path, "write", target.table, ()))
            written(target.table)

    def _layout(self, table: str) -> Layout:
        if table not in self._tables.layouts:
            raise ValueError(f"no table {table} here (tables: {sorted(self._tables.layouts)})")
        return self._tables.layouts[table]

    def _table(self, name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
        self._layout(name)
        return self._tables.rows[name]

    def _frame(
        self, table: str, found: list[dict[str, Any]], columns: tuple[str, ...]
    ) -> DataFrame:
        schema = self._layout(table).schema
        picked = StructType([schema[c] for c in columns])
        return self.spark.createDataFrame(
            [tuple(row.get(c) for c in columns) for row in found], picked
        )
