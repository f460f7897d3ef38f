"""The one place that builds a cassandra-driver `Cluster` for the pipeline's own
sessions (serving, batch bookkeeping, alert sink, schema, status): contact points,
port, the login (PasswordAuthenticator) and the consistency levels all come from
settings, so pointing the jobs at a secured, replicated cluster is configuration only.
"""

from __future__ import annotations

from typing import Any

from infra.settings import Settings


def cluster(
    settings: Settings, *, writes: bool = False, timeout: float | None = None, **kwargs: Any
) -> Any:
    """A `Cluster` whose default profile uses the read consistency level, or the write
    level when the session mostly writes (`writes=True`). `timeout` bounds connecting
    and every request (the driver's defaults otherwise)."""
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile

    level = settings.cassandra_write_consistency if writes else settings.cassandra_read_consistency
    profile = ExecutionProfile(consistency_level=getattr(ConsistencyLevel, level))
    if timeout is not None:
        profile.request_timeout = timeout
        kwargs |= {"connect_timeout": timeout, "control_connection_timeout": timeout}
    if settings.cassandra_username:
        kwargs["auth_provider"] = PlainTextAuthProvider(
            settings.cassandra_username, settings.cassandra_password.get_secret_value()
        )
    return Cluster(
        settings.cassandra_contact_points,
        port=settings.cassandra_port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        **kwargs,
    )
