"""The Cassandra port: the one place that builds a cassandra-driver `Cluster` for the
pipeline's own sessions (serving, batch bookkeeping, alert sink, schema, status): contact
points, port, the login (PasswordAuthenticator) and the consistency levels all come from
settings, so pointing the jobs at a secured, replicated cluster is configuration only.

`open_session(settings, ...)` is what a caller uses: a connected session that closes its
cluster on leaving a `with` block (or on `close()`, for one kept open), and never leaves
a cluster behind when connecting fails:

    with cassandra_client.open_session(settings, writes=True) as session:
        session.execute(...)

Speculative execution: the driver marks a node down when its connection fails, not when
it stops answering. A frozen node (SIGSTOP, a long GC pause, a stalled disk) keeps its
connections open, and every request it coordinates would wait for the request timeout.
Requests marked idempotent (`prepare_idempotent`: the speed layer's reads and upserts,
serving's reads, the alert sink's inserts) go to the next replica after
POS_CASSANDRA_SPECULATIVE_DELAY_MS instead. A lightweight transaction is never marked:
run twice, the second would see the first's write and report itself not applied. Nor is
a write that sets a non-frozen list (`sets_a_list`).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any

from pos_lambda.settings import Settings


def cluster(
    settings: Settings,
    *,
    writes: bool = False,
    timeout: float | None = None,
    only_host: str | None = None,
    **kwargs: Any,
) -> Any:
    """A `Cluster` whose default profile uses the read consistency level, or the write
    level when the session mostly writes (`writes=True`). `timeout` bounds connecting
    and every request (the driver's defaults otherwise). `only_host` sends every request
    to that node (its node-local virtual tables, `system_views`)."""
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import (
        ConstantSpeculativeExecutionPolicy,
        DCAwareRoundRobinPolicy,
        TokenAwarePolicy,
        WhiteListRoundRobinPolicy,
    )

    level = settings.cassandra.write_consistency if writes else settings.cassandra.read_consistency
    # Token-aware over the local data centre (POS_CASSANDRA_LOCAL_DC, else the contact
    # points'): the driver's recommended policy, named (it warns about an implicit one).
    profile = ExecutionProfile(
        consistency_level=getattr(ConsistencyLevel, level),
        # Every `... IF ...` of the pipeline (the pointer, the leases) runs its Paxos
        # phase at this level; its commit phase at `consistency_level`.
        serial_consistency_level=getattr(ConsistencyLevel, settings.cassandra.serial_consistency),
        load_balancing_policy=(
            WhiteListRoundRobinPolicy([only_host])
            if only_host
            else TokenAwarePolicy(
                DCAwareRoundRobinPolicy(local_dc=settings.cassandra.local_dc or None)
            )
        ),
    )
    delay_ms = settings.cassandra.speculative_delay_ms
    if delay_ms:
        # Two more attempts: with RF 3, every replica of a partition may coordinate.
        profile.speculative_execution_policy = ConstantSpeculativeExecutionPolicy(
            delay=delay_ms / 1000, max_attempts=2
        )
    # Cassandra 5 speaks protocol v5; naming it spares a failed negotiation (and warnings).
    kwargs.setdefault("protocol_version", 5)
    if timeout is not None:
        profile.request_timeout = timeout
        kwargs |= {"connect_timeout": timeout, "control_connection_timeout": timeout}
    if settings.cassandra.username:
        kwargs["auth_provider"] = PlainTextAuthProvider(
            settings.cassandra.username, settings.cassandra.password.get_secret_value()
        )
    return Cluster(
        [only_host] if only_host else settings.cassandra_contact_points,
        port=settings.cassandra.port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        **kwargs,
    )


class OpenSession:
    """A connected driver session and the cluster it belongs to: `with` it (the cluster
    shuts down on exit), or keep it and `close()` it."""

    def __init__(self, cluster: Any, session: Any) -> None:
        self.cluster, self.session = cluster, session

    def close(self) -> None:
        self.cluster.shutdown()

    def __enter__(self) -> Any:
        return self.session

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_session(
    settings: Settings,
    *,
    keyspace: bool = True,
    writes: bool = False,
    timeout: float | None = None,
    only_host: str | None = None,
) -> OpenSession:
    """A session of `cluster(settings, ...)` (the same options), in the settings' keyspace
    unless `keyspace` is off. Connecting raises what the driver raises (NoHostAvailable,
    InvalidRequest for a missing keyspace), with the cluster shut down."""
    c = cluster(settings, writes=writes, timeout=timeout, only_host=only_host)
    try:
        session = c.connect(settings.cassandra.keyspace if keyspace else None)
    except BaseException:
        c.shutdown()
        raise
    return OpenSession(c, session)


def sets_a_list(cql_types: Iterable[str]) -> bool:
    """Whether a write of columns of these CQL types sets a non-frozen list, which must
    not run twice. Cassandra keys a list's elements by time UUIDs its coordinator makes;
    two executions of one INSERT carry the same client timestamp, so the second's
    overwrite (a tombstone just below that timestamp) does not delete the first's
    elements, and the list holds every line twice. Found by the cluster chaos run: a
    frozen node's speculated receipt writes doubled `receipts_by_store_day`'s line items.
    A frozen list, a set or a map is written whole or keyed by its values: safe."""
    return any(t.startswith("list<") for t in cql_types)


def prepare_idempotent(session: Any, query: str) -> Any:
    """`query` prepared and marked safe to run twice, so that it may be sent to another
    replica while its first coordinator is silent (speculative execution, above). Only
    for reads and plain upserts (INSERT/UPDATE without IF, DELETE): never a counter
    update or a lightweight transaction."""
    if " IF " in f" {query.upper()} " or "+ ?" in query or "- ?" in query:
        raise ValueError(f"not idempotent, so not marked so: {query}")
    statement = session.prepare(query)
    statement.is_idempotent = True
    return statement


def require_keyspace(settings: Settings) -> None:
    """Fail early, saying what to do, when Cassandra is down or the keyspace is missing
    (the connector and the driver would otherwise fail later, and less clearly)."""
    from cassandra.cluster import NoHostAvailable

    from pos_lambda.adapters.service import ServiceError

    where = f"{','.join(settings.cassandra_contact_points)}:{settings.cassandra.port}"
    try:
        with open_session(settings, keyspace=False, timeout=10) as session:
            row = session.execute(
                "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                (settings.cassandra.keyspace,),
            ).one()
    except NoHostAvailable as exc:
        raise ServiceError(
            f"cannot reach Cassandra at {where}: is it running? try `make up` ({exc})"
        ) from exc
    if row is None:
        raise ServiceError(
            f"keyspace '{settings.cassandra.keyspace}' does not exist in Cassandra at {where}: "
            "create it with `make schema` (or `pos-infra schema`)"
        )


def has_tables(settings: Settings, keyspace: str, tables: list[str]) -> bool:
    """Whether `keyspace` exists with all of `tables` (one read of the schema tables)."""
    with open_session(settings, keyspace=False, timeout=10) as session:
        rows = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
        )
        return set(tables) <= {r.table_name for r in rows}
