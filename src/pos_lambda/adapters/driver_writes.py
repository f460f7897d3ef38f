"""Upserts of a small DataFrame from the Spark driver, with a CQL session of its own.

A micro-batch of a few receipts writes a few rows to each table. Through the Spark
connector each such write is a Spark job with the connector's writer set up in its
tasks: ~100 ms each whatever the number of rows (measured: docs/speed-performance.md).
Here the rows are collected to the driver (the plan's own jobs, without the connector's)
and written with a prepared INSERT per row, the rows of one partition sent together as
an unlogged batch (as the connector groups them: one request and one mutation for
Cassandra where there were many; bounded in rows and in bytes), many requests in flight
at once. Backlogs keep
the connector's writes (`pos_lambda.adapters.cassandra.upsert`): their rows are too many to pass
through the driver.

The statements are the connector's: an INSERT of the given columns, an upsert by
primary key in which a null is written as a null, at the write consistency level
(`POS_CASSANDRA_WRITE_CONSISTENCY`). Instants leave Spark as epoch milliseconds
(`unix_millis`, which truncates as the connector does): PySpark would hand them to
Python as naive datetimes in this process's local time zone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType, TimestampType

from pos_lambda.adapters import cassandra_client
from pos_lambda.adapters.cassandra import Target

# Statements in flight at once; a micro-batch written this way has a few thousand rows at most.
CONCURRENT_WRITES = 64
# Rows of one partition in one unlogged batch at most: a single-partition batch is one
# mutation (Cassandra applies no batch size limit to it), kept well under the commit
# log's mutation limit however many rows of one store-day a micro-batch brings.
MAX_BATCH_ROWS = 100
# ... and bytes of values at most (as `value_bytes` estimates them). A count alone does
# not bound a request: 100 rows of 300 KB values would be one 30 MB CQL message, and
# Cassandra refuses a message over native_transport_max_message_size (16 MiB) and a
# mutation over half a commit log segment (16 MiB by default), failing the micro-batch on
# every replay. 512 KiB leaves room for the protocol's own bytes; a single row larger
# than this goes alone (every row is bounded: a receipt by the contract's message size,
# a dead letter by its value prefix, src/pos_lambda/views/records.py).
MAX_BATCH_BYTES = 512 * 1024
# What a value costs beyond its payload (its length prefix in the CQL frame), and a
# fixed-size value's payload (an int, a bigint, a timestamp: at most 8 bytes).
_VALUE_OVERHEAD = 4
_FIXED_VALUE = 8
# A write that must not be sent twice at once (it sets a non-frozen list, so it is not
# speculated: cassandra_client.sets_a_list) is given this long to answer, then sent
# again as a new request, at most this many times in all. A new request carries a new,
# later client timestamp: its overwrite deletes the earlier request's list elements
# whichever of the two lands first, so a resend is exact where a speculative copy (the
# same timestamp) doubles the list. A frozen node then costs a micro-batch this timeout,
# not the driver's 10 s and a failed micro-batch.
ONCE_ONLY_TIMEOUT_S = 3.0
ONCE_ONLY_ATTEMPTS = 3


Outcome = tuple[bool, Any]  # execute_concurrent's (success, result or exception)


def execute_resending_timeouts(
    execute: Callable[[list[Any], bool, frozenset[Any]], list[Outcome]],
    requests: list[Any],
    attempts: int = ONCE_ONLY_ATTEMPTS,
) -> None:
    """Run `requests` (`execute(requests, once_only, avoid)` runs a list and returns each
    one's outcome, in order). Requests whose statement may run twice went out speculated
    already; the others (`once_only`) that timed out on the client are sent again as new
    requests, up to `attempts` in all, each resend coordinated by another replica than
    the hosts that timed out so far (`avoid`: the token-aware policy would send it to the
    same frozen primary replica every time). Any other failure, or a timeout on the last
    attempt, is raised: the micro-batch fails and is replayed."""
    from cassandra import OperationTimedOut

    once_only = bool(requests) and not requests[0][0].is_idempotent
    pending = requests
    avoid: frozenset[Any] = frozenset()
    for attempt in range(1, attempts + 1):
        outcomes = execute(pending, once_only, avoid)
        failed = [(r, e) for r, (ok, e) in zip(pending, outcomes, strict=True) if not ok]
        if not failed:
            return
        resend = once_only and attempt < attempts
        if not resend or any(not isinstance(e, OperationTimedOut) for _, e in failed):
            raise next((e for _, e in failed if not isinstance(e, OperationTimedOut)), failed[0][1])
        pending = [r for r, _ in failed]
        avoid |= {e.last_host for _, e in failed if getattr(e, "last_host", None) is not None}


class OthersFirst:
    """A load-balancing policy: `child`'s query plan with the hosts in `avoid` moved to
    its end (kept: on one node, or with every replica avoided, they are all there is)."""

    def __init__(self, child: Any, avoid: frozenset[Any]) -> None:
        self.child = child
        self.avoid = avoid

    def make_query_plan(self, working_keyspace: Any = None, query: Any = None) -> list[Any]:
        plan = list(self.child.make_query_plan(working_keyspace, query))
        return [h for h in plan if h not in self.avoid] + [h for h in plan if h in self.avoid]

    def __getattr__(self, name: str) -> Any:  # distance, on_up, ...: the child's
        return getattr(self.child, name)


def value_bytes(value: Any) -> int:
    """An upper estimate of the bytes a bound value takes in a CQL request: payload
    lengths of text and blobs, 8 per number (a decimal: its digits), recursively."""
    if value is None:
        return _VALUE_OVERHEAD
    if isinstance(value, bytes | bytearray | memoryview):
        return _VALUE_OVERHEAD + len(value)
    if isinstance(value, str):
        return _VALUE_OVERHEAD + len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, Decimal):
        return _VALUE_OVERHEAD + _FIXED_VALUE + len(value.as_tuple().digits)
    if isinstance(value, dict):
        return _VALUE_OVERHEAD + sum(value_bytes(k) + value_bytes(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return _VALUE_OVERHEAD + sum(value_bytes(v) for v in value)
    return _VALUE_OVERHEAD + _FIXED_VALUE


def partition_batches(
    rows: Sequence[tuple[Any, ...]],
    key_at: Sequence[int],
    max_rows: int = MAX_BATCH_ROWS,
    max_bytes: int = MAX_BATCH_BYTES,
) -> list[list[tuple[Any, ...]]]:
    """`rows` grouped by their values at the positions `key_at` (the partition key), in
    lists of at most `max_rows` rows and `max_bytes` bytes (`value_bytes`; a row larger
    than that alone), in order of first appearance."""
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[i] for i in key_at), []).append(row)
    batches: list[list[tuple[Any, ...]]] = []
    for group in groups.values():
        batch: list[tuple[Any, ...]] = []
        size = 0
        for row in group:
            row_size = sum(value_bytes(v) for v in row)
            if batch and (len(batch) >= max_rows or size + row_size > max_bytes):
                batches.append(batch)
                batch, size = [], 0
            batch.append(row)
            size += row_size
        batches.append(batch)
    return batches


def _has_instant(kind: DataType) -> bool:
    if isinstance(kind, TimestampType):
        return True
    if isinstance(kind, ArrayType):
        return _has_instant(kind.elementType)
    if isinstance(kind, MapType):
        return _has_instant(kind.keyType) or _has_instant(kind.valueType)
    if isinstance(kind, StructType):
        return any(_has_instant(f.dataType) for f in kind.fields)
    return False


def sendable(df: DataFrame, columns: tuple[str, ...]) -> tuple[Column, ...]:
    """`columns` of `df` as the driver collects them for CQL: instants as epoch millis.

    Raises ValueError for an instant inside a collection or struct, which would reach
    Python in the local time zone (no table written this way has one)."""
    kinds = {f.name: f.dataType for f in df.schema.fields}
    selected = []
    for name in columns:
        kind = kinds[name]
        if isinstance(kind, TimestampType):
            selected.append(F.unix_millis(F.col(name)).alias(name))
        elif _has_instant(kind):
            raise ValueError(f"column {name} ({kind.simpleString()}): nested instants unsupported")
        else:
            selected.append(F.col(name))
    return tuple(selected)


def cql_value(value: Any, cql_type: Any) -> Any:
    """A collected Spark value as cassandra-driver binds it for `cql_type` (a driver
    `cqltypes` class): a struct becomes a tuple in the user type's field order, named
    by field, so that the two orders need not agree."""
    if value is None:
        return None
    subtypes: tuple[Any, ...] = getattr(cql_type, "subtypes", ())
    if getattr(cql_type, "fieldnames", None) is not None:  # a user-defined type
        names = cql_type.fieldnames
        return tuple(cql_value(value[n], t) for n, t in zip(names, subtypes, strict=True))
    if cql_type.typename in ("list", "set"):
        return [cql_value(v, subtypes[0]) for v in value]
    if cql_type.typename == "map":
        return {cql_value(k, subtypes[0]): cql_value(v, subtypes[1]) for k, v in value.items()}
    return value


@dataclass
class DriverWriter:
    """Upserts rows into the keyspace's tables (an INSERT prepared once per table and
    columns) with a cassandra-driver session."""

    session: Any  # a cassandra-driver Session
    keyspace: str
    consistency: str  # a ConsistencyLevel name: the connector's write level
    _statements: dict[tuple[str, tuple[str, ...]], Any] = field(default_factory=dict)

    def upsert(self, df: DataFrame, table: str, columns: tuple[str, ...] = ()) -> None:
        """Write `columns` of `df` (all of them when empty) into `table`, as INSERTs."""
        self.upsert_each(df, (Target(table, columns),))

    def upsert_each(
        self,
        df: DataFrame,
        targets: Sequence[Target],
        written: Callable[[str], None] = lambda table: None,
    ) -> None:
        """Each target's rows of `df` into its table, in order, from one collect of `df`
        (one Spark job, where a collect per table would cost one each: ~50 ms of a
        10-record micro-batch per table); `written(table)` once a table is written."""
        wanted = [t.columns or tuple(df.columns) for t in targets]
        columns = tuple(dict.fromkeys(c for names in wanted for c in names))
        chosen = [F.lit(True) if t.where is None else t.where for t in targets]
        rows = df.select(
            *sendable(df, columns), *(c.alias(f"_target_{n}") for n, c in enumerate(chosen))
        ).collect()
        for n, (target, names) in enumerate(zip(targets, wanted, strict=True)):
            mine = [row for row in rows if row[len(columns) + n]]
            if mine:
                statement = self._statement(target.table, names)
                types = [c.type for c in statement.column_metadata]
                at = [columns.index(c) for c in names]
                values = [tuple(map(cql_value, (row[i] for i in at), types)) for row in mine]
                # The partition key's positions among the INSERT's values, as Cassandra
                # reported them when the statement was prepared.
                batches = partition_batches(values, statement.routing_key_indexes)
                requests = [self._request(statement, b) for b in batches]
                execute_resending_timeouts(self._execute, requests)
            written(target.table)

    def _execute(
        self, requests: list[Any], once_only: bool, avoid: frozenset[Any]
    ) -> list[Outcome]:
        """Every request's outcome, many in flight at once; a once-only write (above) with
        the shorter timeout, coordinated by the hosts in `avoid` last."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.concurrent import execute_concurrent

        profile: Any = EXEC_PROFILE_DEFAULT
        if once_only:
            default = self.session.get_execution_profile(EXEC_PROFILE_DEFAULT)
            profile = self.session.execution_profile_clone_update(
                EXEC_PROFILE_DEFAULT,
                request_timeout=ONCE_ONLY_TIMEOUT_S,
                load_balancing_policy=OthersFirst(default.load_balancing_policy, avoid),
            )
        return list(
            execute_concurrent(
                self.session,
                requests,
                concurrency=CONCURRENT_WRITES,
                raise_on_first_error=False,
                execution_profile=profile,
            )
        )

    def _request(self, statement: Any, rows: list[tuple[Any, ...]]) -> tuple[Any, Any]:
        """One partition's rows: the statement alone for one row, else an unlogged batch."""
        if len(rows) == 1:
            return statement, rows[0]
        from cassandra.query import BatchStatement, BatchType

        # An unlogged batch of one partition's upserts may run twice if its rows may.
        batch = BatchStatement(BatchType.UNLOGGED, consistency_level=statement.consistency_level)
        batch.is_idempotent = statement.is_idempotent
        for row in rows:
            batch.add(statement, row)
        return batch, ()

    def _statement(self, table: str, columns: tuple[str, ...]) -> Any:
        key = (table, columns)
        if key not in self._statements:
            from cassandra import ConsistencyLevel

            marks = ", ".join("?" for _ in columns)
            query = f"INSERT INTO {self.keyspace}.{table} ({', '.join(columns)}) VALUES ({marks})"
            meta = self.session.cluster.metadata.keyspaces[self.keyspace].tables[table]
            # Sent to a second replica only if twice is the same as once (not for lists).
            if cassandra_client.sets_a_list(meta.columns[c].cql_type for c in columns):
                statement = self.session.prepare(query)
            else:
                statement = cassandra_client.prepare_idempotent(self.session, query)
            statement.consistency_level = getattr(ConsistencyLevel, self.consistency)
            self._statements[key] = statement
        return self._statements[key]
