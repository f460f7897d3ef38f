"""Keyspaces with the schema applied, lent to one test at a time and emptied between.

A test that compares whole tables with a ledger needs a keyspace of its own. Making one
(the contract's 26 CREATE statements) and dropping it cost about 6.5 s on this machine,
paid by some 60 tests of `make test`; TRUNCATE of its 16 tables costs about 0.6 s. So a
returned keyspace is truncated and lent again, unless the test changed its schema (a
table added, dropped or altered): that one is dropped, and the next borrower gets a new
one. Every keyspace the pool made is dropped when the session ends.
"""

from __future__ import annotations

import uuid

from pos_lambda.adapters import schema_apply
from pos_lambda.settings import Settings

Shape = frozenset[tuple[str, str, str]]  # (table, column, type)


class KeyspacePool:
    def __init__(self, settings: Settings) -> None:
        from cassandra.cluster import Cluster

        self.settings = settings
        self._cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
        self._session = self._cluster.connect()
        self._free: list[str] = []
        self._made: list[str] = []
        self._shape: Shape | None = None  # of a keyspace as the contract makes it

    def borrow(self) -> str:
        if self._free:
            return self._free.pop()
        keyspace = f"pos_t_{uuid.uuid4().hex[:10]}"
        schema_apply.apply_cql(self.settings, keyspace)
        self._made.append(keyspace)
        if self._shape is None:
            self._shape = self.shape(keyspace)
        return keyspace

    def give_back(self, keyspace: str) -> None:
        """Empty the keyspace for the next test, or drop it if its schema is not the
        contract's any more (a reused keyspace must look like a new one)."""
        if self.shape(keyspace) != self._shape:
            self._drop(keyspace)
            return
        for table in sorted({table for table, _, _ in self._shape or ()}):
            self._session.execute(f"TRUNCATE {keyspace}.{table}", timeout=60)
        self._free.append(keyspace)

    def shape(self, keyspace: str) -> Shape:
        rows = self._session.execute(
            "SELECT table_name, column_name, type FROM system_schema.columns "
            "WHERE keyspace_name = %s",
            (keyspace,),
        )
        return frozenset((r.table_name, r.column_name, r.type) for r in rows)

    def close(self) -> None:
        for keyspace in list(self._made):
            self._drop(keyspace)
        self._cluster.shutdown()

    def _drop(self, keyspace: str) -> None:
        self._session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
        if keyspace in self._made:
            self._made.remove(keyspace)
        if keyspace in self._free:
            self._free.remove(keyspace)
