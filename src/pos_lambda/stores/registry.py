"""Where stores are kept: a small port, its Cassandra adapter and an in-memory fake.

    registry = CassandraStores(load_settings())      # the `stores` table
    registry.put(store); registry.get(101); registry.all()

`InMemoryStores` is the fake for unit tests; integration tests use the real table.
Rows are validated on the way in (`Store`) and again on the way out (`store_from_row`),
so a row edited by hand in cqlsh that breaks the rules is refused with a clear error
instead of reaching a local-day answer. Connection trouble becomes `RegistryUnavailable`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from pos_lambda.adapters.cassandra_client import OpenSession
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings
from pos_lambda.stores.model import Store, StoreError, store_from_row


class RegistryUnavailable(Exception):
    """The registry's storage cannot be reached or refused the query."""


class StoreRegistry(Protocol):
    def get(self, operation_id: int) -> Store | None: ...

    def all(self) -> list[Store]: ...

    def put(self, store: Store) -> None: ...

    def close(self) -> None: ...


class InMemoryStores:
    """The fake: a dict (unit tests only)."""

    def __init__(self, stores: Iterable[Store] = ()) -> None:
        self._stores = {s.operation_id: s for s in stores}

    def get(self, operation_id: int) -> Store | None:
        return self._stores.get(operation_id)

    def all(self) -> list[Store]:
        return [self._stores[k] for k in sorted(self._stores)]

    def put(self, store: Store) -> None:
        self._stores[store.operation_id] = store

    def close(self) -> None:
        pass


_COLUMNS = "operation_id, name, time_zone, opening_hours"
STATEMENTS = {
    "get": f"SELECT {_COLUMNS} FROM {cql.STORES_TABLE} WHERE operation_id = ?",
    # A full scan: the registry holds one small row per store (thousands at most).
    "all": f"SELECT {_COLUMNS} FROM {cql.STORES_TABLE}",
    "put": f"INSERT INTO {cql.STORES_TABLE} ({_COLUMNS}, updated_at) VALUES (?, ?, ?, ?, ?)",
}


def _store(row: Any) -> Store:
    try:
        return store_from_row(row.operation_id, row.name, row.time_zone, row.opening_hours or {})
    except StoreError as exc:
        # Name the row: a reader of the whole table (pos-alerts at start) must say which.
        raise StoreError(f"store {row.operation_id}: {exc}") from None


class CassandraStores:
    """The `stores` table through cassandra-driver; connects lazily, once."""

    def __init__(
        self, settings: Settings, timeout: float | None = None, writes: bool = True
    ) -> None:
        self._settings = settings
        self._writes = writes  # the write consistency level (pos-stores), else the read one
        self._timeout = timeout or settings.serve.timeout_seconds
        self._lock = threading.Lock()
        self._opened: OpenSession | None = None
        self._prepared: dict[str, Any] = {}

    def _run(self, name: str, *params: Any) -> Any:
        from cassandra import DriverException
        from cassandra.cluster import NoHostAvailable

        s = self._settings
        where = f"{','.join(s.cassandra_contact_points)}:{s.cassandra.port}"
        try:
            with self._lock:
                opened = self._opened
                if opened is None:
                    from pos_lambda.adapters import cassandra_client

                    opened = cassandra_client.open_session(
                        s, writes=self._writes, timeout=self._timeout
                    )
                    try:
                        self._prepared = {
                            k: cassandra_client.prepare_idempotent(opened.session, v)
                            for k, v in STATEMENTS.items()
                        }
                    except BaseException:
                        opened.close()
                        raise
                    self._opened = opened
            return opened.session.execute(self._prepared[name], params)
        except NoHostAvailable:
            raise RegistryUnavailable(
                f"Cassandra at {where} is unreachable; is it running? try `make up`"
            ) from None
        except DriverException as exc:
            raise RegistryUnavailable(
                f"Cassandra at {where} refused a query: {exc} (is the schema of keyspace "
                f"{s.cassandra.keyspace!r} applied? `make schema`)"
            ) from None

    def get(self, operation_id: int) -> Store | None:
        row = self._run("get", operation_id).one()
        return None if row is None else _store(row)

    def all(self) -> list[Store]:
        return sorted((_store(r) for r in self._run("all")), key=lambda s: s.operation_id)

    def put(self, store: Store) -> None:
        self._run(
            "put",
            store.operation_id,
            store.name,
            store.time_zone,
            store.opening_hours(),
            datetime.now(UTC),
        )

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                self._opened.close()
            self._opened = None
