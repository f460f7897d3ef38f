"""`pos-provision`: make the configured Kafka and Cassandra ready for the pipeline.

    pos-provision schema                   # keyspace and tables (idempotent)
    pos-provision topics                   # the pipeline's topics (idempotent)
    pos-provision cassandra-role [--role pos]  # a secured cluster: schema + the pipeline's role
    pos-provision ready kafka|cassandra    # exit 0 only if that service serves the pipeline

Why its own command: these are product operations on a deployment's services, run by
the image (compose.yaml's `cassandra-init` and `kafka-init`, and the deploy test's
stand-ins' health checks), so they ship in `pos_lambda`. `pos-infra` (the local
development runtime, package `pos_lambda_dev`, never in the product's wheel) starts and
stops services on a developer's machine and offers `schema`, `topics` and
`cassandra-role` too, through these same functions. Configuration: POS_* environment
variables (`python -m pos_lambda.settings` prints them); every subcommand has --help.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import ServiceError
from pos_lambda.provision import cassandra_roles, ready
from pos_lambda.settings import Settings, load_settings

PROBES: dict[str, Callable[[Settings], bool]] = {
    "kafka": ready.kafka_ready,
    "cassandra": ready.cassandra_ready,
}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_schema(settings: Settings, _: argparse.Namespace) -> int:
    n = schema_apply.apply_cql(settings)
    _say(f"cassandra: {n} statements applied to keyspace '{settings.cassandra.keyspace}'")
    return 0


def cmd_topics(settings: Settings, _: argparse.Namespace) -> int:
    created = schema_apply.create_topics(settings)
    _say(f"kafka: {'created ' + ', '.join(created) if created else 'all topics present'}")
    return 0


def cmd_cassandra_role(settings: Settings, args: argparse.Namespace) -> int:
    # The entry point reads the role's password; POS_CASSANDRA_USERNAME/PASSWORD are
    # the administrator's for this command.
    password = os.environ.get("POS_CASSANDRA_ROLE_PASSWORD", "")
    if cassandra_roles.ensure_admin(settings):
        _say("cassandra: the default superuser password was replaced by the configured one")
    n = schema_apply.apply_cql(settings)
    _say(f"cassandra: {n} statements applied to keyspace '{settings.cassandra.keyspace}'")
    if not cassandra_roles.cluster_authenticates(settings):
        # An open cluster (AllowAllAuthenticator, as `pos-infra up` runs locally): every
        # client already has every permission, and Cassandra refuses role passwords and
        # grants there. The schema is what the pipeline needs; say why nothing else ran.
        _say(
            "cassandra: this cluster does not authenticate (AllowAllAuthenticator), so no "
            f"role was created; enable PasswordAuthenticator and CassandraAuthorizer, then "
            f"run this again to create role '{args.role}'"
        )
        return 0
    cassandra_roles.ensure_role(settings, args.role, password)
    _say(
        f"cassandra: role '{args.role}' can log in with its password and holds every "
        f"permission on keyspace '{settings.cassandra.keyspace}'"
    )
    return 0


def cmd_ready(settings: Settings, args: argparse.Namespace) -> int:
    ok = PROBES[args.service](settings)
    print(f"{args.service:<10} {'ready' if ok else 'not ready'}")
    return 0 if ok else 1


def add_role_arguments(role: argparse.ArgumentParser) -> None:
    role.add_argument(
        "--role",
        default=os.environ.get("POS_CASSANDRA_ROLE", "pos"),
        help="role name (default: POS_CASSANDRA_ROLE or pos)",
    )


ROLE_HELP = (
    "as the administrator in POS_CASSANDRA_USERNAME/PASSWORD: apply the schema, "
    "create the pipeline's role (or rotate its password: POS_CASSANDRA_ROLE_PASSWORD) "
    "and grant it the keyspace"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-provision",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("schema", help="create the Cassandra keyspace and tables")
    sub.add_parser("topics", help="create the Kafka topics")
    add_role_arguments(sub.add_parser("cassandra-role", help=ROLE_HELP))
    probe = sub.add_parser(
        "ready", help="exit 0 only if the configured service serves the pipeline (a health check)"
    )
    probe.add_argument("service", choices=sorted(PROBES))
    return parser


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "schema": cmd_schema,
    "topics": cmd_topics,
    "cassandra-role": cmd_cassandra_role,
    "ready": cmd_ready,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](load_settings(), args)
    except ServiceError as exc:
        _say(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
