"""Apply the data contract to the running services: Cassandra keyspace and tables,
Kafka topics with explicit partition counts. Both steps are idempotent."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings

_CREATE_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)\.(\w+) \((.*)\)", re.S)
_PRIMARY_KEY = re.compile(r"PRIMARY KEY\s*\((.*)\)", re.S)


@dataclass(frozen=True)
class TableShape:
    """What a CREATE TABLE statement declares: its columns and its primary key."""

    keyspace: str
    name: str
    columns: dict[str, str]  # name -> CQL type (with STATIC where declared)
    primary_key: tuple[str, ...]


def table_shape(statement: str) -> TableShape | None:
    """Parse one of pos_lambda.schemas.cql's CREATE TABLE statements (None for other statements)."""
    match = _CREATE_TABLE.match(statement.strip())
    if match is None:
        return None
    keyspace, name, body = match.groups()
    body = body.split(") WITH ")[0]
    columns: dict[str, str] = {}
    key: list[str] = []
    pk = _PRIMARY_KEY.search(body)
    for line in body[: pk.start() if pk else None].split(",\n"):
        col, _, cql_type = line.strip().rstrip(",").partition(" ")
        if not col:
            continue
        if cql_type.endswith(" PRIMARY KEY"):  # `alert_id text PRIMARY KEY`
            cql_type = cql_type.removesuffix(" PRIMARY KEY")
            key.append(col)
        columns[col] = cql_type
    if pk:
        key.extend(re.findall(r"\w+", pk.group(1)))
    return TableShape(keyspace, name, columns, tuple(key))


def migrations(declared: TableShape, existing: dict[str, str]) -> list[str]:
    """ALTER TABLE statements that add the columns a table created by an older version
    lacks. A different primary key cannot be altered: that raises, saying what to do.

    existing: column name -> kind (partition_key, clustering, regular, static), as
    system_schema.columns lists them for the table.
    """
    if not existing:
        return []
    have_key = {c for c, kind in existing.items() if kind in ("partition_key", "clustering")}
    table = f"{declared.keyspace}.{declared.name}"
    if have_key != set(declared.primary_key):
        raise ServiceError(
            f"table {table} has primary key columns {sorted(have_key)}, this version "
            f"declares {sorted(set(declared.primary_key))}: a key cannot be altered. If "
            f"its rows can be recomputed (views) or it is empty, run `DROP TABLE {table}` "
            "in cqlsh, then `make schema`."
        )
    return [
        f"ALTER TABLE {table} ADD {col} {cql_type}"
        for col, cql_type in declared.columns.items()
        if col not in existing
    ]


def _existing_columns(session: Any, keyspace: str, table: str) -> dict[str, str]:
    rows = session.execute(
        "SELECT column_name, kind FROM system_schema.columns "
        "WHERE keyspace_name = %s AND table_name = %s",
        (keyspace, table),
    )
    return {r.column_name: r.kind for r in rows}


def apply_cql(settings: Settings, keyspace: str | None = None) -> int:
    """Create the keyspace, types and tables, and add the columns that tables created by
    an older version lack (CREATE ... IF NOT EXISTS leaves an existing table as it is);
    returns the number of statements run."""
    from cassandra.cluster import NoHostAvailable

    from pos_lambda.adapters import cassandra_client
    from pos_lambda.schemas import cql

    ks = keyspace or settings.cassandra.keyspace
    try:
        opened = cassandra_client.open_session(settings, keyspace=False, writes=True)
    except NoHostAvailable as exc:
        raise ServiceError(
            f"cannot reach Cassandra at {settings.cassandra_contact_points}:"
            f"{settings.cassandra.port}: is it running? try `make up` ({exc})"
        ) from exc
    with opened as session:
        statements = cql.ddl(ks, settings.cassandra.replication_factor)
        run = 0
        for stmt in statements:
            shape = table_shape(stmt)
            if shape is not None:
                existing = _existing_columns(session, shape.keyspace, shape.name)
                for alter in migrations(shape, existing):
                    print(f"schema: {alter}")
                    session.execute(alter, timeout=60)
                    run += 1
            session.execute(stmt, timeout=60)
            run += 1
        return run


def pipeline_topics(settings: Settings) -> dict[str, int]:
    return {
        settings.topics.transactions: settings.topics.partitions,
        settings.topics.dead_letters: settings.topics.partitions,
        settings.topics.alerts: settings.topics.partitions,
        settings.topics.receipts: settings.topics.partitions,
    }


def create_topics(settings: Settings, topics: dict[str, int] | None = None) -> list[str]:
    """Create missing topics (name -> partitions; default: the pipeline's); returns those
    created. The one implementation lives in the Kafka adapter."""
    from pos_lambda.adapters import kafka_admin

    wanted = topics if topics is not None else pipeline_topics(settings)
    return kafka_admin.create_topics(
        settings.bootstrap_servers,
        wanted,
        settings.topics.replication_factor,
        settings.kafka.security_config,
    )
