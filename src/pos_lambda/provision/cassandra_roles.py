"""The pipeline's own Cassandra role on a cluster with PasswordAuthenticator.

`pos-provision cassandra-role` (also `pos-infra cassandra-role`) logs in as an
administrator (POS_CASSANDRA_USERNAME and POS_CASSANDRA_PASSWORD name the administrator
for this one command), applies the schema, creates the role POS_CASSANDRA_ROLE
(default `pos`) with the password in POS_CASSANDRA_ROLE_PASSWORD, or sets that password
on an existing role (a rotation), and grants it every permission on the pipeline's
keyspace and nothing else. A fresh Cassandra only knows
the superuser `cassandra`/`cassandra`: when the administrator is `cassandra` and its
configured password is refused, the default one is tried once and replaced by the
configured one, so no well-known password survives the first start.
"""

from __future__ import annotations

import re

from pydantic import SecretStr

from pos_lambda.adapters import cassandra_client
from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings

DEFAULT_SUPERUSER = ("cassandra", "cassandra")
# The authenticator's setting is `authenticator` up to Cassandra 4.1 and
# `authenticator.class_name` since 5.0 (a parameterized class there).
AUTHENTICATOR_SETTINGS = ("authenticator", "authenticator.class_name")


def authenticates(configured: list[str]) -> bool:
    """Whether a node with these authenticator settings asks clients to log in: anything
    but AllowAllAuthenticator (by short or full class name) does; an empty answer is
    taken as authenticating, the safe side (roles are then attempted and errors shown)."""
    named = [value.rsplit(".", 1)[-1] for value in configured if value]
    return not named or any(name != "AllowAllAuthenticator" for name in named)


def cluster_authenticates(settings: Settings) -> bool:
    """Ask the node itself (its `system_views.settings` virtual table)."""
    with _connect(settings) as session:
        rows = session.execute(
            "SELECT value FROM system_views.settings WHERE name IN (%s, %s)",
            AUTHENTICATOR_SETTINGS,
        )
        return authenticates([row.value for row in rows])


def _connect(settings: Settings) -> cassandra_client.OpenSession:
    return cassandra_client.open_session(settings, keyspace=False, writes=True)


def ensure_admin(settings: Settings) -> bool:
    """Check the administrator login; on a fresh node whose superuser still has the
    default password, replace it by the configured one. True when it was replaced."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    try:
        _connect(settings).close()
        return False
    except NoHostAvailable as exc:
        refused = any(isinstance(e, AuthenticationFailed) for e in exc.errors.values())
        if not (refused and settings.cassandra.username == DEFAULT_SUPERUSER[0]):
            raise ServiceError(f"cannot log in to Cassandra as the administrator: {exc}") from exc
    default = settings.with_overrides(**{"cassandra_password": SecretStr(DEFAULT_SUPERUSER[1])})
    try:
        opened = _connect(default)
    except NoHostAvailable as exc:
        raise ServiceError(
            "Cassandra refused both the configured administrator password and the default "
            f"one: {exc}"
        ) from exc
    with opened as session:
        session.execute(
            "ALTER ROLE cassandra WITH PASSWORD = %s",
            (settings.cassandra.password.get_secret_value(),),
        )
    return True


def ensure_role(settings: Settings, role: str, password: str) -> None:
    """As the administrator: create `role` (or set its password) and grant it every
    permission on the pipeline's keyspace (which must exist: apply the schema first)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,47}", role):
        raise ServiceError(f"role name {role!r}: use lower-case letters, digits and _")
    if not password:
        raise ServiceError("POS_CASSANDRA_ROLE_PASSWORD is empty: the role needs a password")
    with _connect(settings) as session:
        run = session.execute
        run(
            f'CREATE ROLE IF NOT EXISTS "{role}" WITH PASSWORD = %s AND LOGIN = true',
            (password,),
        )
        run(f'ALTER ROLE "{role}" WITH PASSWORD = %s', (password,))
        run(f'GRANT ALL PERMISSIONS ON KEYSPACE {settings.cassandra.keyspace} TO "{role}"')
