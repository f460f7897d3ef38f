"""The serving layer's views in memory: the `Statements` port (pos_lambda.serving.views)
over tables built from the keyspace's DDL, for unit tests without Cassandra.

`Serving(settings, views=memory_views(keyspace))` runs the real `Views` adapter, its
statements (`store.STATEMENTS`) and its mapping, on the rows a test writes. Nothing
here is declared twice: the tables, their columns and keys, static columns, clustering
order and SAI indexes are read from `pos_lambda.schemas.cql.table_ddl`, as
`pos_lambda.adapters.memory_store` reads them (that parser maps the columns to Spark
types and leaves static columns out; this one needs neither Spark nor a session). So a
test cannot write a column the keyspace lacks, and a statement that names one, or reads
a column that is neither a key nor indexed without ALLOW FILTERING, fails here as
Cassandra would refuse it.

A write replaces the cells it names of the row with its primary key (an INSERT); values
are kept as the driver returns them: an instant as naive UTC to the millisecond, a date
as a date. Every statement run is logged as (name, parameters), in order.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from types import SimpleNamespace
from typing import Any

from pos_lambda.schemas import cql
from pos_lambda.serving.model import AggregateRow, Conflict, DayVersion, Fix, Pointer, Receipt
from pos_lambda.serving.receipt_status import DeadLetter, IndexedReceipt, ReceiptKey
from pos_lambda.serving.views import STATEMENTS, Views
from pos_lambda.settings import Settings


@dataclass(frozen=True)
class Table:
    """One table of the DDL: its columns (name -> CQL type, in order), keys, statics."""

    name: str
    columns: Mapping[str, str]
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    descending: frozenset[str]  # clustering columns in DESC order
    static: frozenset[str]
    indexed: frozenset[str]  # SAI-indexed columns

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*self.partition_key, *self.clustering)


def _split(text: str) -> list[str]:
    """`text` split at the commas outside <...> and (...), each part stripped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _body(statement: str) -> str:
    """The content of a CREATE statement's outer parentheses."""
    rest = statement.partition("(")[2]
    depth = 1
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return rest[:i]
    raise ValueError(f"unbalanced parentheses in {statement[:80]!r}")


def tables() -> dict[str, Table]:
    """Every table of the keyspace's DDL (schemas/cql.py), by name."""
    ddl = cql.table_ddl("ks")
    indexed: dict[str, set[str]] = {}
    for statement in ddl:
        on = re.match(r"CREATE INDEX .* ON ks\.(\w+) \((\w+)\)", statement)
        if on is not None:
            indexed.setdefault(on[1], set()).add(on[2])
    found: dict[str, Table] = {}
    for statement in ddl:
        if not statement.startswith("CREATE TABLE"):
            continue  # a user type (its values are the caller's objects) or an index
        name = statement.split("(", 1)[0].split()[-1].removeprefix("ks.")
        columns: dict[str, str] = {}
        static: set[str] = set()
        key: list[str] = []
        for part in _split(_body(statement)):
            if part.startswith("PRIMARY KEY"):
                key = _split(_body(part))
                continue
            column, kind = part.split(None, 1)
            if kind.endswith(" PRIMARY KEY"):
                kind, key = kind.removesuffix(" PRIMARY KEY"), [column]
            if kind.endswith(" STATIC"):
                kind = kind.removesuffix(" STATIC")
                static.add(column)
            columns[column] = kind
        partition = tuple(_split(key[0].strip("()"))) if key[0].startswith("(") else (key[0],)
        order = re.search(r"CLUSTERING ORDER BY \((.*)\)", statement)
        descending = {
            c.split()[0] for c in _split(order[1] if order else "") if c.endswith(" DESC")
        }
        found[name] = Table(
            name,
            columns,
            partition,
            clustering=tuple(key[1:]),
            descending=frozenset(descending),
            static=frozenset(static),
            indexed=frozenset(indexed.get(name, ())),
        )
    return found


_SELECT = re.compile(
    r"SELECT (?P<distinct>DISTINCT )?(?P<columns>.+?) FROM (?P<table>\w+)"
    r"(?: WHERE (?P<where>.+?))?(?: LIMIT (?P<limit>\?|\d+))?(?P<filtering> ALLOW FILTERING)?$"
)
_CONDITION = re.compile(r"(\w+) (=|>=|<=|<|>) \?$")
_COMPARE = {
    "=": lambda a, b: a == b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


@dataclass(frozen=True)
class Select:
    """A prepared statement of `STATEMENTS`, checked against its table."""

    table: Table
    columns: tuple[str, ...]
    distinct: bool
    where: tuple[tuple[str, str], ...]  # (column, operator), one parameter each
    limit: int | None  # a literal LIMIT; None: none, or a parameter (`limit_bound`)
    limit_bound: bool

    @staticmethod
    def prepare(text: str, known: Mapping[str, Table]) -> Select:
        """The statement `text`, refused (ValueError) where Cassandra would refuse it:
        an unknown table or column, or a restriction on a column that is neither a key
        nor SAI-indexed without ALLOW FILTERING."""
        found = _SELECT.match(" ".join(text.split()))
        if found is None:
            raise ValueError(f"not a SELECT this fake reads: {text!r}")
        table = known[found["table"]]
        columns = (
            tuple(table.columns) if found["columns"] == "*" else tuple(_split(found["columns"]))
        )
        where = []
        for part in found["where"].split(" AND ") if found["where"] else []:
            condition = _CONDITION.match(part.strip())
            if condition is None:
                raise ValueError(f"a condition this fake does not read: {part!r}")
            where.append((condition[1], condition[2]))
        unknown = [c for c in (*columns, *(c for c, _ in where)) if c not in table.columns]
        if unknown:
            raise ValueError(f"{table.name} has no columns {unknown} (statement {text!r})")
        filtered = [c for c, _ in where if c not in table.primary_key and c not in table.indexed]
        if filtered and not found["filtering"]:
            raise ValueError(f"{table.name}: {filtered} need an index or ALLOW FILTERING")
        limit = found["limit"]
        return Select(
            table,
            columns,
            bool(found["distinct"]),
            tuple(where),
            int(limit) if limit and limit != "?" else None,
            limit == "?",
        )


def _stored(kind: str, value: Any) -> Any:
    """`value` of a column of CQL type `kind` as the driver returns it."""
    if value is None:
        return None
    if kind == "timestamp":
        return _naive_utc(value)
    if kind == "date" and isinstance(value, dt.datetime):
        return value.date()
    return value


def _naive_utc(value: Any) -> Any:
    """An instant as the driver returns it: naive UTC, to the millisecond."""
    if not isinstance(value, dt.datetime):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


@dataclass
class _Partition:
    static: dict[str, Any] = field(default_factory=dict)
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)


class MemoryKeyspace:
    """The keyspace's tables in memory, answering the serving layer's statements."""

    def __init__(self) -> None:
        self.tables = tables()
        self.prepared = {
            name: Select.prepare(text, self.tables) for name, text in STATEMENTS.items()
        }
        self._data: dict[str, dict[tuple[Any, ...], _Partition]] = {t: {} for t in self.tables}
        self.log: list[tuple[str, tuple[Any, ...]]] = []
        self.closed = False

    # --- writes ------------------------------------------------------------------------

    def insert(self, table: str, **values: Any) -> None:
        """Write one row (its static cells too), as an INSERT of the cells named."""
        t = self.tables[table]
        unknown = sorted(set(values) - set(t.columns))
        if unknown:
            raise ValueError(f"{table} has no columns {unknown}")
        stored = {c: _stored(t.columns[c], v) for c, v in values.items()}
        if any(stored.get(c) is None for c in t.partition_key):
            raise ValueError(f"{table}: the partition key {t.partition_key} needs values")
        partition = self._data[table].setdefault(
            tuple(stored[c] for c in t.partition_key), _Partition()
        )
        partition.static.update({c: v for c, v in stored.items() if c in t.static})
        cells = {c: v for c, v in stored.items() if c not in t.static}
        if set(cells) - set(t.partition_key):  # more than static cells: a row
            key = tuple(stored.get(c) for c in t.clustering)
            if None in key:
                raise ValueError(f"{table}: a null in the clustering key {t.clustering}")
            partition.rows.setdefault(key, {}).update(cells)

    # --- the Statements port -------------------------------------------------------------

    def rows(self, name: str, *params: Any) -> list[Any]:
        self.log.append((name, params))
        return self._select(self.prepared[name], params)

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        return [self.rows(name, *params) for name, params in calls]

    def page(
        self, name: str, params: tuple[Any, ...], fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Any], bytes | None]:
        """A page by offset; the state is the next page's first row, as bytes."""
        found = self.rows(name, *params)
        first = int(paging_state or b"0")
        end = first + fetch_size
        return found[first:end], (str(end).encode() if end < len(found) else None)

    def scan(self, name: str, params: tuple[Any, ...], fetch_size: int) -> Iterator[Any]:
        yield from self.rows(name, *params)

    def close(self) -> None:
        self.closed = True

    # --- reads -------------------------------------------------------------------------

    def _select(self, select: Select, params: tuple[Any, ...]) -> list[Any]:
        t = select.table
        bound = [_naive_utc(p) for p in params]
        limit = bound.pop() if select.limit_bound else select.limit
        conditions = list(zip(select.where, bound, strict=True))
        out, seen = [], set()
        for key, partition in sorted(self._data[t.name].items()):
            for row in self._partition_rows(t, key, partition):
                if not all(
                    row.get(c) is not None and _COMPARE[op](row[c], v) for (c, op), v in conditions
                ):
                    continue
                picked = tuple(row.get(c) for c in select.columns)
                if select.distinct:
                    if picked in seen:
                        continue
                    seen.add(picked)
                out.append(SimpleNamespace(**dict(zip(select.columns, picked, strict=True))))
        return out[:limit] if limit is not None else out

    @staticmethod
    def _partition_rows(
        t: Table, key: tuple[Any, ...], partition: _Partition
    ) -> list[dict[str, Any]]:
        """A partition's rows in clustering order, each with the static cells; a
        partition of static cells only reads as one row of them (as Cassandra's)."""
        shared = {**dict(zip(t.partition_key, key, strict=True)), **partition.static}
        if not partition.rows:
            return [shared] if partition.static else []
        keys = list(partition.rows)
        for i in reversed(range(len(t.clustering))):  # a stable sort per column, last first
            keys.sort(key=itemgetter(i), reverse=t.clustering[i] in t.descending)
        return [{**shared, **partition.rows[k]} for k in keys]

    # --- the views' rows, from the serving layer's own types ----------------------------

    def aggregates(
        self, speed: Sequence[AggregateRow] = (), batch: Sequence[AggregateRow] = ()
    ) -> None:
        """Speed rows (agg_15m_speed) and batch rows (agg_15m_batch, by their version)."""
        for rows, table in ((speed, cql.AGG_SPEED_TABLE), (batch, cql.AGG_BATCH_TABLE)):
            for a in rows:
                version = {"version": a.version} if table == cql.AGG_BATCH_TABLE else {}
                self.insert(
                    table,
                    operation_id=a.operation_id,
                    day=a.window_start.date(),
                    window_start=a.window_start,
                    **a.aggregate._asdict(),
                    **version,
                )

    def pointer(self, pointer: Pointer) -> None:
        """The batch pointer's partition: its horizon and its days' committed versions."""
        self.insert(cql.BATCH_POINTER_TABLE, view_name=cql.BATCH_VIEW_NAME, horizon=pointer.horizon)
        for v in pointer.days.values():
            self.day_version(v)

    def day_version(self, v: DayVersion) -> None:
        """One day's committed version (a commit of the batch replaces the day's row)."""
        self.insert(
            cql.BATCH_POINTER_TABLE,
            view_name=cql.BATCH_VIEW_NAME,
            day=v.day,
            version=v.version,
            covered_until=v.covered_until,
            generation=v.generation,
            delta_version=v.delta_version,
        )

    def receipts(self, store: int, receipts: Sequence[Receipt]) -> None:
        """Raw rows of the speed view (receipts_by_store_day), by their UTC day."""
        for r in receipts:
            self.insert(
                cql.RAW_TABLE,
                operation_id=store,
                day=r.happened_at.date(),
                happened_at=r.happened_at,
                vendor_fiscal_module=r.vendor_fiscal_module,
                transaction_id=r.transaction_id,
                line_items=r.line_items,
                item_quantity=r.item_quantity,
                revenue=r.revenue,
                kafka_partition=r.kafka_partition,
                kafka_offset=r.kafka_offset,
                late=r.late,
            )

    def batch_receipts(
        self, store: int, version: str, receipts: Sequence[Receipt], master_version: int = 0
    ) -> None:
        """Rows of receipts_batch in the partition of `version` (a day version's
        `receipts_ref` names it), archived by the master dataset's `master_version`."""
        for r in receipts:
            self.insert(
                cql.RECEIPTS_BATCH_TABLE,
                operation_id=store,
                day=r.happened_at.date(),
                version=version,
                happened_at=r.happened_at,
                vendor_fiscal_module=r.vendor_fiscal_module,
                transaction_id=r.transaction_id,
                line_items=r.line_items,
                item_quantity=r.item_quantity,
                revenue=r.revenue,
                kafka_partition=r.kafka_partition,
                kafka_offset=r.kafka_offset,
                late=r.late,
                master_version=master_version,
            )

    def conflicts(self, store: int, conflicts: Sequence[Conflict]) -> None:
        """The speed layer's conflicts rows, by their winner's UTC day."""
        for c in conflicts:
            self.insert(
                cql.CONFLICTS_TABLE,
                operation_id=store,
                winner_day=c.winner_happened_at.date(),
                vendor_fiscal_module=c.vendor_fiscal_module,
                transaction_id=c.transaction_id,
                kafka_partition=c.kafka_partition,
                kafka_offset=c.kafka_offset,
                differs=c.differs,
                happened_at=c.happened_at,
                winner_happened_at=c.winner_happened_at,
                revenue=c.revenue,
                winner_revenue=c.winner_revenue,
                winner_kafka_partition=c.winner_kafka_partition,
                winner_kafka_offset=c.winner_kafka_offset,
            )

    def fixes(self, store: int, fixes: Sequence[Fix]) -> None:
        """Rows of batch_fixes, by their window's UTC day."""
        for f in fixes:
            self.insert(
                cql.BATCH_FIXES_TABLE,
                operation_id=store,
                day=f.window_start.date(),
                window_start=f.window_start,
                version=f.version,
                batch_receipts=f.batch_receipts,
                speed_receipts=f.speed_receipts,
                receipts_fixed=f.receipts_fixed,
                batch_revenue=f.batch_revenue,
                speed_revenue=f.speed_revenue,
                revenue_fixed=f.revenue_fixed,
                duplicates=f.duplicates,
                conflicts=f.conflicts,
                beyond_speed_bound=f.beyond_speed_bound,
                checked_at=f.checked_at,
            )

    def indexed(self, key: ReceiptKey, receipt: IndexedReceipt) -> None:
        """The receipt's row in the speed layer's natural-key index (receipt_keys)."""
        resent = receipt.last_resend
        self.insert(
            cql.RECEIPT_KEYS_TABLE,
            operation_id=key.operation_id,
            vendor_fiscal_module=key.vendor_fiscal_module,
            key_bucket=key.transaction_id // cql.KEY_BUCKET_SIZE,
            transaction_id=key.transaction_id,
            happened_at=receipt.happened_at,
            day=receipt.day,
            kafka_partition=receipt.winner.partition,
            kafka_offset=receipt.winner.offset,
            kafka_timestamp=receipt.winner.timestamp,
            late=receipt.late,
            beyond_bound=receipt.beyond_bound,
            resent_kafka_partition=resent.partition if resent else None,
            resent_kafka_offset=resent.offset if resent else None,
            resent_kafka_timestamp=resent.timestamp if resent else None,
        )

    def batch_indexed(self, key: ReceiptKey, receipt: IndexedReceipt, generation: str) -> None:
        """The receipt's row in the batch layer's natural-key index (receipt_keys_batch)
        under `generation` (the pointer's `generation` says which one is served)."""
        self.insert(
            cql.RECEIPT_KEYS_BATCH_TABLE,
            generation=generation,
            operation_id=key.operation_id,
            vendor_fiscal_module=key.vendor_fiscal_module,
            key_bucket=key.transaction_id // cql.KEY_BUCKET_SIZE,
            transaction_id=key.transaction_id,
            happened_at=receipt.happened_at,
            day=receipt.day,
            kafka_partition=receipt.winner.partition,
            kafka_offset=receipt.winner.offset,
            kafka_timestamp=receipt.winner.timestamp,
            late=receipt.late,
            beyond_bound=receipt.beyond_bound,
        )

    def dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Rows of dead_letters, keyed by their Kafka coordinates."""
        for d in letters:
            self.insert(
                cql.DEAD_LETTERS_TABLE,
                kafka_topic=d.kafka_topic,
                kafka_partition=d.kafka.partition,
                kafka_offset=d.kafka.offset,
                kafka_timestamp=d.kafka.timestamp,
                reason=d.reason,
                detail=d.detail,
                operation_id=d.operation_id,
                vendor_fiscal_module=d.vendor_fiscal_module,
                transaction_id=d.transaction_id,
            )

    def reads_of(self, *names: str) -> list[tuple[Any, ...]]:
        """The parameters of the statements `names` run so far, in order."""
        return [params for name, params in self.log if name in names]


def memory_views(keyspace: MemoryKeyspace | None = None) -> Views:
    """The serving layer's `Views` adapter over `keyspace` (a new, empty one if None)."""
    return Views(Settings(), keyspace or MemoryKeyspace())
