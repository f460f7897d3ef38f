"""The serving layer's only I/O: reads of the views through cassandra-driver.

`Views` (the `pos_lambda.serving.ports.ServingViews` adapter) maps rows to the plain
rows of `pos_lambda.serving.model`; it reads them through the `Statements` port, which
`CassandraStatements` runs on Cassandra (unit tests: on tables in memory built from the
same DDL, tests/support/memory_views.py).

Prepared statements only (each prepared on its first use in a connection, not all at
connect: a keyspace whose schema lags this release, an index or table missing, then fails
only the requests that read through what is missing, with the hint to apply the schema,
and the others keep answering), single-partition reads for
a store's days, and Storage-Attached Index reads (Cassandra 5 SAI, declared in
src/pos_lambda/schemas/cql.py) where a question crosses stores: "which stores sold on day D" reads
the day's aggregate rows of every store through the `day` index, so its cost follows
the day's rows (stores x 96), never the history. Driver rows become the plain rows of
`pos_lambda.serving.model`; timestamps come back as naive UTC and leave here timezone-aware.
Connection trouble becomes `Unavailable` with the reason, never a driver traceback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Protocol

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.schemas import cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.schemas.contract import LineItem
from pos_lambda.serving import merge
from pos_lambda.serving.errors import QueryError, Unavailable
from pos_lambda.serving.gaps import BatchDeviceGaps, SpeedNumber
from pos_lambda.serving.model import (
    AggregateRow,
    Conflict,
    DayVersion,
    Fix,
    Pointer,
    Receipt,
    Segment,
    Source,
    SpeedQuery,
    receipts_partition,
)
from pos_lambda.serving.receipt_status import (
    ConflictingCopy,
    Content,
    DeadLetter,
    IndexedReceipt,
    KafkaCopy,
    ReceiptKey,
)
from pos_lambda.settings import Settings
from pos_lambda.views.gaps import parse_range

log = logging.getLogger("pos.serving")

# Rows per page of the dead-letter count's scan, at most.
DEAD_LETTER_FETCH_SIZE = 5000
# The health answer lists the views query first.
SPEED_QUERIES = (cql.SPEED_QUERY_OF_JOB["views"], cql.SPEED_QUERY_OF_JOB["archiver"])

_AGG = ", ".join(("operation_id", "window_start", *Aggregate._fields))
_RECEIPT = (
    "happened_at, vendor_fiscal_module, transaction_id, item_quantity, revenue, late, "
    "line_items, kafka_partition, kafka_offset"
)
STATEMENTS = {
    "horizon": f"SELECT horizon FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = ? LIMIT 1",
    "pointer_days": f"SELECT day, version, covered_until, generation, delta_version "
    f"FROM {cql.BATCH_POINTER_TABLE} "
    "WHERE view_name = ? AND day >= ? AND day <= ?",
    "speed_day": f"SELECT {_AGG} FROM {cql.AGG_SPEED_TABLE} WHERE operation_id = ? AND day = ?",
    "batch_day": f"SELECT {_AGG}, version FROM {cql.AGG_BATCH_TABLE} "
    "WHERE operation_id = ? AND day = ? AND version = ?",
    # SAI reads across stores (src/pos_lambda/schemas/cql.py, serving indexes)
    "speed_all_stores": f"SELECT {_AGG} FROM {cql.AGG_SPEED_TABLE} WHERE day = ?",
    "batch_all_stores": f"SELECT {_AGG}, version FROM {cql.AGG_BATCH_TABLE} "
    "WHERE day = ? AND version = ?",
    "speed_has_store": f"SELECT day FROM {cql.AGG_SPEED_TABLE} WHERE operation_id = ? LIMIT 1",
    "batch_has_store": f"SELECT day FROM {cql.AGG_BATCH_TABLE} WHERE operation_id = ? LIMIT 1",
    # Each a slice [start, end) of one store-day partition (pos_lambda.serving.model.Segment).
    "receipts_batch": f"SELECT {_RECEIPT} FROM {cql.RECEIPTS_BATCH_TABLE} "
    "WHERE operation_id = ? AND day = ? AND version = ? AND happened_at >= ? AND happened_at < ?",
    # A generation's rows of one store-day, those the committed table version counts:
    # a filter within the one partition read (rows of a run not committed yet skipped).
    "receipts_generation": f"SELECT {_RECEIPT} FROM {cql.RECEIPTS_BATCH_TABLE} "
    "WHERE operation_id = ? AND day = ? AND version = ? AND happened_at >= ? "
    "AND happened_at < ? AND master_version <= ? ALLOW FILTERING",
    "receipts_speed": f"SELECT {_RECEIPT} FROM {cql.RAW_TABLE} "
    "WHERE operation_id = ? AND day = ? AND happened_at >= ? AND happened_at < ?",
    "conflicts": f"SELECT * FROM {cql.CONFLICTS_TABLE} WHERE operation_id = ? AND winner_day = ?",
    "conflicts_batch": f"SELECT * FROM {cql.CONFLICTS_BATCH_TABLE} WHERE operation_id = ? "
    "AND winner_day = ? AND version = ?",
    # The issues listing, paged (pos_lambda.serving.service.Serving.store_day): one
    # segment of a store-day's conflicts, by their winner's time, each a filter within
    # the one partition read (winner_happened_at is no clustering column); the batch's
    # only as far as its commit counts them (master_version, as receipts_generation).
    "issues_conflicts": f"SELECT * FROM {cql.CONFLICTS_TABLE} WHERE operation_id = ? "
    "AND winner_day = ? AND winner_happened_at >= ? AND winner_happened_at < ? "
    "ALLOW FILTERING",
    "issues_conflicts_generation": f"SELECT * FROM {cql.CONFLICTS_BATCH_TABLE} "
    "WHERE operation_id = ? AND winner_day = ? AND version = ? AND winner_happened_at >= ? "
    "AND winner_happened_at < ? AND master_version <= ? ALLOW FILTERING",
    "fixes": f"SELECT * FROM {cql.BATCH_FIXES_TABLE} WHERE operation_id = ? AND day = ?",
    # The gaps view (pos_lambda.serving.gaps): a store-day's rows of the served version,
    # and the speed view's numbers of the day (one partition).
    "gaps_batch": "SELECT vendor_fiscal_module, first_number, last_number, receipt_count, "
    f"missing, restarts, revenue FROM {cql.GAPS_BATCH_TABLE} "
    "WHERE operation_id = ? AND day = ? AND version = ?",
    "gaps_speed": "SELECT vendor_fiscal_module, transaction_id, happened_at, revenue "
    f"FROM {cql.RAW_TABLE} WHERE operation_id = ? AND day = ?",
    "batch_runs": f"SELECT * FROM {cql.BATCH_RUNS_TABLE} WHERE view_name = ? LIMIT ?",
    "speed_progress": f"SELECT * FROM {cql.SPEED_PROGRESS_TABLE} WHERE query_name = ? LIMIT 1",
    # Partition keys only: one row per (topic, Kafka partition), a handful.
    "dead_letter_partitions": f"SELECT DISTINCT kafka_topic, kafka_partition "
    f"FROM {cql.DEAD_LETTERS_TABLE}",
    "dead_letter_reasons": f"SELECT reason FROM {cql.DEAD_LETTERS_TABLE} "
    "WHERE kafka_topic = ? AND kafka_partition = ?",
    # Receipt status (pos_lambda.serving.receipt_status): one row by full primary key,
    # one clustering prefix of a store-day's conflicts, the dead letters of one natural
    # key through its SAI indexes (src/pos_lambda/schemas/cql.py).
    "receipt_key": f"SELECT * FROM {cql.RECEIPT_KEYS_TABLE} WHERE operation_id = ? "
    "AND vendor_fiscal_module = ? AND key_bucket = ? AND transaction_id = ?",
    # The batch layer's index: the generation the pointer serves (a static cell: one
    # read of the pointer's partition), then one row by full primary key.
    "served_generation": f"SELECT generation FROM {cql.BATCH_POINTER_TABLE} "
    "WHERE view_name = ? LIMIT 1",
    "receipt_key_batch": f"SELECT * FROM {cql.RECEIPT_KEYS_BATCH_TABLE} WHERE generation = ? "
    "AND operation_id = ? AND vendor_fiscal_module = ? AND key_bucket = ? "
    "AND transaction_id = ?",
    "receipt_conflicts": f"SELECT * FROM {cql.CONFLICTS_TABLE} WHERE operation_id = ? "
    "AND winner_day = ? AND vendor_fiscal_module = ? AND transaction_id = ?",
    "receipt_conflicts_batch": f"SELECT * FROM {cql.CONFLICTS_BATCH_TABLE} "
    "WHERE operation_id = ? AND winner_day = ? AND version = ? AND vendor_fiscal_module = ? "
    "AND transaction_id = ?",
    # The three columns are SAI-indexed: an intersection, so another store's or device's
    # dead letters of the same number are not read; LIMIT bounds one key's (a hostile
    # producer can send one receipt malformed without end).
    "receipt_dead_letters": "SELECT kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, "
    f"reason, detail, operation_id, vendor_fiscal_module, transaction_id "
    f"FROM {cql.DEAD_LETTERS_TABLE} WHERE transaction_id = ? AND operation_id = ? "
    "AND vendor_fiscal_module = ? LIMIT ?",
}


def utc(value: datetime | None) -> datetime | None:
    """The driver returns timestamps as naive UTC datetimes."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _utc(value: datetime) -> datetime:
    out = utc(value)
    assert out is not None
    return out


def _decimal_or_none(value: Any) -> Decimal | None:
    return None if value is None else Decimal(value)


def _day(value: Any) -> date:
    out: date = value.date() if hasattr(value, "date") else value  # cassandra.util.Date
    return out


def _aggregate(r: Any) -> AggregateRow:
    return AggregateRow(
        operation_id=r.operation_id,
        window_start=_utc(r.window_start),
        aggregate=Aggregate.of_row(r),
        version=getattr(r, "version", None),
    )


def _conflict(r: Any) -> Conflict:
    """A row of either layer's conflicts table, as the issues listing shows it."""
    return Conflict(
        vendor_fiscal_module=r.vendor_fiscal_module,
        transaction_id=r.transaction_id,
        differs=list(r.differs or []),
        happened_at=_utc(r.happened_at),
        winner_happened_at=_utc(r.winner_happened_at),
        revenue=Decimal(r.revenue),
        winner_revenue=_decimal_or_none(r.winner_revenue),
        kafka_partition=r.kafka_partition,
        kafka_offset=r.kafka_offset,
        winner_kafka_partition=r.winner_kafka_partition,
        winner_kafka_offset=r.winner_kafka_offset,
    )


def _content(r: Any, prefix: str) -> Content:
    """One version of a conflicts row: the copy's (prefix "") or the winner's ("winner_")."""
    items = getattr(r, f"{prefix}line_items")
    return Content(
        happened_at=_utc(getattr(r, f"{prefix}happened_at")),
        line_items=None
        if items is None
        else [LineItem(i.title, Decimal(i.price), i.amount) for i in items],
        item_quantity=getattr(r, f"{prefix}item_quantity"),
        revenue=_decimal_or_none(getattr(r, f"{prefix}revenue")),
        kafka=KafkaCopy(
            getattr(r, f"{prefix}kafka_partition"),
            getattr(r, f"{prefix}kafka_offset"),
            utc(getattr(r, f"{prefix}kafka_timestamp")),
        ),
    )


def _indexed(r: Any) -> IndexedReceipt:
    """A row of either layer's natural-key index; the batch layer's has no resend cells."""
    resent = (
        KafkaCopy(r.resent_kafka_partition, r.resent_kafka_offset, utc(r.resent_kafka_timestamp))
        if getattr(r, "resent_kafka_offset", None) is not None
        else None
    )
    return IndexedReceipt(
        happened_at=_utc(r.happened_at),
        day=_day(r.day),
        winner=KafkaCopy(r.kafka_partition, r.kafka_offset, utc(r.kafka_timestamp)),
        late=bool(r.late),
        beyond_bound=bool(r.beyond_bound),
        last_resend=resent,
    )


class Statements(Protocol):
    """What `Views` reads through (the port): the named statements of `STATEMENTS`, each
    bound to its parameters in order. A row has the selected columns as attributes, as
    the driver's rows do. `CassandraStatements` runs them on Cassandra; unit tests run
    them on tables in memory built from the same DDL (tests/support/memory_views.py)."""

    def rows(self, name: str, *params: Any) -> list[Any]:
        """All rows of one statement."""
        ...

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        """Independent statements (run concurrently where that helps); results in order."""
        ...

    def page(
        self, name: str, params: tuple[Any, ...], fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Any], bytes | None]:
        """One page of at most `fetch_size` rows from `paging_state` (None: the first),
        and the state of the next page (None: no more rows)."""
        ...

    def scan(self, name: str, params: tuple[Any, ...], fetch_size: int) -> Iterator[Any]:
        """Every row, read `fetch_size` at a time as the caller iterates: a caller that
        stops early reads no further page."""
        ...

    def close(self) -> None: ...


def unreachable_reasons(exc: Exception) -> str:
    """Why the driver reached no host: per host when it says (a dict of errors), else its
    message. Connecting with a missing keyspace gives a list of hosts instead."""
    errors = exc.args[1] if len(exc.args) > 1 else None
    if isinstance(errors, dict) and errors:
        return "; ".join(f"{h}: {e}" for h, e in errors.items())
    return str(exc.args[0]) if exc.args else str(exc)


class CassandraStatements:
    """`Statements` on Cassandra; connects lazily and again after a failed connect."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._cluster: Any = None
        self._session: Any = None
        self._prepared: dict[str, Any] = {}

    @property
    def where(self) -> str:
        s = self._settings
        return f"{','.join(s.cassandra_contact_points)}:{s.cassandra.port}"

    def close(self) -> None:
        with self._lock:
            if self._cluster is not None:
                self._cluster.shutdown()
            self._cluster = self._session = None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        from cassandra import DriverException, OperationTimedOut, RequestExecutionException
        from cassandra.cluster import NoHostAvailable
        from cassandra.protocol import SyntaxException

        try:
            yield
        except NoHostAvailable as exc:
            raise Unavailable(
                f"Cassandra at {self.where} is unreachable ({unreachable_reasons(exc)}); is "
                "it running, and does the keyspace exist? try `make up` (or `make schema`)"
            ) from None
        except (OperationTimedOut, RequestExecutionException) as exc:
            raise Unavailable(f"Cassandra at {self.where} did not answer: {exc}") from None
        except SyntaxException:
            raise
        except DriverException as exc:  # InvalidRequest: keyspace/table/index missing
            raise Unavailable(
                f"Cassandra at {self.where} refused a query: {exc} (is the schema of keyspace "
                f"{self._settings.cassandra.keyspace!r} applied? `make schema`)"
            ) from None

    @contextmanager
    def _paging_refused(self, paging_state: bytes | None) -> Iterator[None]:
        """Cassandra refusing a paging state is the caller's token, not an outage: page
        tokens are signed (pos_lambda.serving.paging), so this is one of ours gone stale (another
        server version or schema): start the store-day again."""
        from cassandra import InvalidRequest
        from cassandra.protocol import ProtocolException

        try:
            yield
        except (ProtocolException, InvalidRequest) as exc:
            if paging_state is None:
                raise
            raise QueryError(
                f"page is no longer valid ({exc}): ask again without page for the first one"
            ) from None

    def _connected(self) -> Any:
        with self._lock:
            if self._session is not None:
                return self._session
            from pos_lambda.adapters import cassandra_client

            s = self._settings
            # Login, read consistency level and timeouts (connect and request) from settings.
            cluster = cassandra_client.cluster(s, timeout=s.serve.timeout_seconds)
            try:
                with self._errors():
                    session = cluster.connect(s.cassandra.keyspace)
            except BaseException:
                cluster.shutdown()
                raise
            # Statements are prepared per connection, each on first use (`_statement`).
            self._cluster, self._session, self._prepared = cluster, session, {}
            return session

    def _statement(self, session: Any, name: str) -> Any:
        """Statement `name` prepared on `session`, at its first use. Not all at connect:
        one statement the keyspace cannot take (a serving process newer than the schema,
        an index or table missing) would fail every request, where it should fail only
        the requests that run it. A statement that failed is prepared again next time,
        so applying the schema heals the running process."""
        prepared = self._prepared.get(name)
        if prepared is not None:
            return prepared
        from cassandra import InvalidRequest

        from pos_lambda.adapters import cassandra_client

        with self._errors():  # connection trouble, as for any query
            try:
                prepared = cassandra_client.prepare_idempotent(session, STATEMENTS[name])
            except InvalidRequest as exc:  # the keyspace lacks what the statement needs
                keyspace = self._settings.cassandra.keyspace
                raise Unavailable(
                    f"keyspace {keyspace!r} in Cassandra at {self.where} lacks what this "
                    f"request reads (statement {name}: {exc}): the serving layer is newer "
                    "than the keyspace's schema. Apply the schema (`make schema`, or "
                    "`pos-infra schema`; `pos-provision schema` where only the product is "
                    "installed), then ask again. Requests that do not need it are answered "
                    "meanwhile."
                ) from None
        with self._lock:
            # Kept only for the connection it was prepared on (a close and reconnect may
            # have come between); a concurrent first use may have prepared it too.
            if self._session is session:
                prepared = self._prepared.setdefault(name, prepared)
            return prepared

    def _run(self, name: str, *params: Any, fetch_size: int | None = None) -> Any:
        session = self._connected()
        bound = self._statement(session, name).bind(params)
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        return session, bound

    def rows(self, name: str, *params: Any) -> list[Any]:
        session, bound = self._run(name, *params)
        with self._errors():
            return list(session.execute(bound))

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        """Run independent reads concurrently; results in call order."""
        prepared = [self._run(name, *params) for name, params in calls]
        with self._errors():
            futures = [session.execute_async(bound) for session, bound in prepared]
            return [list(f.result()) for f in futures]

    def page(
        self, name: str, params: tuple[Any, ...], fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Any], bytes | None]:
        session, bound = self._run(name, *params, fetch_size=fetch_size)
        with self._errors(), self._paging_refused(paging_state):
            result = session.execute(bound, paging_state=paging_state)
            return list(result.current_rows), result.paging_state

    def scan(self, name: str, params: tuple[Any, ...], fetch_size: int) -> Iterator[Any]:
        session, bound = self._run(name, *params, fetch_size=fetch_size)
        with self._errors():
            yield from session.execute(bound)  # the driver pages transparently


class Views:
    """The views as `pos_lambda.serving.model` rows (the `ServingViews` port), read
    through `statements`: Cassandra's, from `settings`, unless given."""

    def __init__(self, settings: Settings, statements: Statements | None = None) -> None:
        self.statements = statements or CassandraStatements(settings)

    def close(self) -> None:
        self.statements.close()

    def rows(self, name: str, *params: Any) -> list[Any]:
        return self.statements.rows(name, *params)

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[Any]]:
        """Run independent reads concurrently; results in call order."""
        return self.statements.many(calls)

    # --- the batch pointer ------------------------------------------------------

    def pointer(self, first: date, last: date) -> Pointer:
        """The horizon and the committed version of each day in first..last.

        Two reads, not one snapshot: each day's version comes with its own
        covered_until and the horizon only caps further, so a commit landing between
        the reads still gives every window exactly one source.
        """
        horizon, days = self.many(
            [
                ("horizon", (cql.BATCH_VIEW_NAME,)),
                ("pointer_days", (cql.BATCH_VIEW_NAME, first, last)),
            ]
        )
        return Pointer(
            horizon=utc(horizon[0].horizon) if horizon else None,
            days={
                _day(r.day): DayVersion(
                    _day(r.day),
                    r.version,
                    _utc(r.covered_until),
                    r.generation,
                    r.delta_version,
                )
                for r in days
                if r.day is not None and r.version is not None
            },
        )

    # --- aggregates ---------------------------------------------------------------

    def store_days(
        self, store: int, days: Sequence[date], pointer: Pointer
    ) -> tuple[list[AggregateRow], list[AggregateRow]]:
        """(batch rows of the committed versions, speed rows) of a store's days."""
        calls: list[tuple[str, tuple[Any, ...]]] = [("speed_day", (store, d)) for d in days]
        committed = [pointer.days[d] for d in days if d in pointer.days]
        calls += [("batch_day", (store, v.day, v.version)) for v in committed]
        results = self.many(calls)
        speed = [_aggregate(r) for rows in results[: len(days)] for r in rows]
        batch = [_aggregate(r) for rows in results[len(days) :] for r in rows]
        return batch, speed

    def all_stores_day(
        self, day: date, pointer: Pointer
    ) -> tuple[list[AggregateRow], list[AggregateRow]]:
        """(batch, speed) rows of every store on `day`, through the SAI `day` indexes."""
        calls: list[tuple[str, tuple[Any, ...]]] = [("speed_all_stores", (day,))]
        if day in pointer.days:
            calls.append(("batch_all_stores", (day, pointer.days[day].version)))
        results = self.many(calls)
        speed = [_aggregate(r) for r in results[0]]
        batch = [_aggregate(r) for r in results[1]] if len(results) > 1 else []
        return batch, speed

    def store_known(self, store: int) -> bool:
        speed, batch = self.many([("speed_has_store", (store,)), ("batch_has_store", (store,))])
        return bool(speed or batch)

    # --- raw receipts (paged) ---------------------------------------------------------

    def receipts(
        self, store: int, segment: Segment, fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Receipt], bytes | None]:
        """One Cassandra page of a store's receipts in one segment of a listing."""
        g = segment
        args: tuple[Any, ...]
        if g.source == "batch":
            assert g.ref is not None
            partition, served_upto = receipts_partition(g.ref)
            statement, args = "receipts_batch", (store, g.day, partition, g.start, g.end)
            if served_upto is not None:
                statement, args = "receipts_generation", (*args, served_upto)
        else:
            statement, args = "receipts_speed", (store, g.day, g.start, g.end)
        rows, following = self.statements.page(statement, args, fetch_size, paging_state)
        source: Source = g.source
        return [
            Receipt(
                happened_at=_utc(r.happened_at),
                vendor_fiscal_module=r.vendor_fiscal_module,
                transaction_id=r.transaction_id,
                item_quantity=r.item_quantity,
                revenue=Decimal(r.revenue),
                late=bool(r.late),
                line_items=[
                    LineItem(i.title, Decimal(i.price), i.amount) for i in (r.line_items or [])
                ],
                kafka_partition=r.kafka_partition,
                kafka_offset=r.kafka_offset,
                source=source,
                final=source == "batch",
            )
            for r in rows
        ], following

    # --- conflicts and fixes ------------------------------------------------------------

    def _served_conflicts(
        self, name: str, store: int, day: date, key: tuple[Any, ...] = ()
    ) -> list[Any]:
        """The conflicts rows of a store's UTC day (`key`: a clustering prefix) that the
        served views count: the batch version's where the batch answers, the speed
        layer's elsewhere (`merge.served_conflicts`)."""
        pointer = self.pointer(day, day)
        served = pointer.days.get(day)
        split = merge.batch_split(pointer, day)
        if served is None or served.generation is None or split == merge.day_bounds(day)[0]:
            # No batch version (or one of a release that kept the speed layer's table).
            return self.rows(name, store, day, *key)
        version, bound = receipts_partition(served.receipts_ref)
        speed, batch = self.many(
            [(name, (store, day, *key)), (f"{name}_batch", (store, day, version, *key))]
        )
        return merge.served_conflicts(batch, speed, split, bound)

    def conflicts(self, store: int, day: date) -> list[Conflict]:
        return [_conflict(r) for r in self._served_conflicts("conflicts", store, day)]

    def conflicts_page(
        self, store: int, segment: Segment, fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Conflict], bytes | None]:
        """One Cassandra page of a store's conflicts in one segment of the issues listing:
        those whose winner happened in [segment.start, segment.end), from the segment's
        side (`merge.served_conflicts` decides the same, per day, unpaged)."""
        g = segment
        span = (g.start, g.end)
        args: tuple[Any, ...] = (store, g.day, *span)
        statement = "issues_conflicts"
        if g.source == "batch":
            assert g.ref is not None
            version, served_upto = receipts_partition(g.ref)
            # A version of a release that kept the speed layer's conflicts table has no
            # generation: its conflicts are the speed table's (as _served_conflicts).
            if served_upto is not None:
                statement = "issues_conflicts_generation"
                args = (store, g.day, version, *span, served_upto)
        rows, following = self.statements.page(statement, args, fetch_size, paging_state)
        return [_conflict(r) for r in rows], following

    def gaps(
        self, store: int, day: date, version: str | None
    ) -> tuple[list[BatchDeviceGaps], list[SpeedNumber]]:
        """(the batch gaps rows of `version`, none without one; the speed view's numbers)
        of a store's UTC day."""
        calls: list[tuple[str, tuple[Any, ...]]] = [("gaps_speed", (store, day))]
        if version is not None:
            calls.append(("gaps_batch", (store, day, version)))
        results = self.many(calls)
        speed = [
            SpeedNumber(
                r.vendor_fiscal_module,
                r.transaction_id,
                _utc(r.happened_at),
                Decimal(r.revenue if r.revenue is not None else "0.00"),
            )
            for r in results[0]
        ]
        batch = [
            BatchDeviceGaps(
                r.vendor_fiscal_module,
                r.first_number,
                r.last_number,
                r.receipt_count,
                tuple(parse_range(m) for m in r.missing or ()),
                tuple(r.restarts or ()),
                Decimal(r.revenue if r.revenue is not None else "0.00"),
            )
            for r in (results[1] if version is not None else [])
        ]
        return batch, speed

    def fixes(self, store: int, day: date) -> list[Fix]:
        def dec(v: Any) -> Decimal:
            return Decimal(v) if v is not None else Decimal("0.00")

        return [
            Fix(
                window_start=_utc(r.window_start),
                version=r.version,
                batch_receipts=r.batch_receipts or 0,
                speed_receipts=r.speed_receipts or 0,
                receipts_fixed=r.receipts_fixed or 0,
                batch_revenue=dec(r.batch_revenue),
                speed_revenue=dec(r.speed_revenue),
                revenue_fixed=dec(r.revenue_fixed),
                duplicates=r.duplicates or 0,
                conflicts=r.conflicts or 0,
                beyond_speed_bound=r.beyond_speed_bound or 0,
                checked_at=utc(r.checked_at),
            )
            for r in self.rows("fixes", store, day)
        ]

    # --- pipeline health -------------------------------------------------------------------

    def batch_runs(self, limit: int) -> list[BatchRun]:
        return [BatchRun.from_row(r) for r in self.rows("batch_runs", cql.BATCH_VIEW_NAME, limit)]

    def speed_progress(self, now: datetime) -> list[SpeedQuery]:
        out = []
        for name, rows in zip(
            SPEED_QUERIES, self.many([("speed_progress", (q,)) for q in SPEED_QUERIES]), strict=True
        ):
            if not rows:
                continue
            r = rows[0]
            finished = utc(r.finished_at)
            out.append(
                SpeedQuery(
                    query_name=name,
                    batch_id=r.batch_id,
                    finished_at=finished,
                    age_seconds=(now - finished).total_seconds() if finished else None,
                    kafka_lag=r.kafka_lag,
                    input_rows=r.input_rows,
                    processed_rows_per_second=r.processed_rows_per_second,
                )
            )
        return out

    # --- receipt status (the port pos_lambda.serving.receipt_status.ReceiptViews) -------------

    def indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        bucket = key.transaction_id // cql.KEY_BUCKET_SIZE
        rows = self.rows(
            "receipt_key", key.operation_id, key.vendor_fiscal_module, bucket, key.transaction_id
        )
        return _indexed(rows[0]) if rows else None

    def batch_indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        served = self.rows("served_generation", cql.BATCH_VIEW_NAME)
        generation = served[0].generation if served else None
        if generation is None:  # no commit yet, or one of a release before generations
            return None
        bucket = key.transaction_id // cql.KEY_BUCKET_SIZE
        rows = self.rows(
            "receipt_key_batch",
            generation,
            key.operation_id,
            key.vendor_fiscal_module,
            bucket,
            key.transaction_id,
        )
        return _indexed(rows[0]) if rows else None

    def conflicting_copies(self, key: ReceiptKey, winner_day: date) -> list[ConflictingCopy]:
        rows = self._served_conflicts(
            "receipt_conflicts",
            key.operation_id,
            winner_day,
            (key.vendor_fiscal_module, key.transaction_id),
        )
        return [
            ConflictingCopy(
                differs=list(r.differs or []),
                copy=_content(r, ""),
                winner=_content(r, "winner_"),
            )
            for r in rows
        ]

    def dead_letters_of(self, key: ReceiptKey, limit: int) -> list[DeadLetter]:
        return [
            DeadLetter(
                operation_id=r.operation_id,
                vendor_fiscal_module=r.vendor_fiscal_module,
                transaction_id=r.transaction_id,
                kafka_topic=r.kafka_topic,
                kafka=KafkaCopy(r.kafka_partition, r.kafka_offset, utc(r.kafka_timestamp)),
                reason=r.reason or "unknown",
                detail=r.detail,
            )
            for r in self.rows(
                "receipt_dead_letters",
                key.transaction_id,
                key.operation_id,
                key.vendor_fiscal_module,
                limit,
            )
        ]

    def dead_letter_reasons(self, limit: int) -> tuple[list[str], bool]:
        """Reasons of the dead letters, at most `limit` (and whether that cut the scan)."""
        partitions = self.rows("dead_letter_partitions")
        reasons: list[str] = []
        for p in partitions:
            # Pages no larger than what is still to count (and one row more, which tells
            # a cut scan): a bound of 1000 reads 1001 rows, not a 5000-row page.
            wanted = min(DEAD_LETTER_FETCH_SIZE, limit + 1 - len(reasons))
            scanned = self.statements.scan(
                "dead_letter_reasons", (p.kafka_topic, p.kafka_partition), fetch_size=wanted
            )
            for r in scanned:
                if len(reasons) >= limit:
                    return reasons, True
                reasons.append(r.reason or "unknown")
        return reasons, False
