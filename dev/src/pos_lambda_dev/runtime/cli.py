"""`pos-infra`: fetch jars, start/stop/inspect the local Kafka and Cassandra,
apply the schema and create topics: the local development runtime (package
`pos_lambda_dev`, installed by `make setup`, never in the product's wheel).

    pos-infra up            # jars (once), Kafka + Cassandra, schema, topics
    pos-infra status        # exit 0 only if both services are ready
    pos-infra status kafka  # just one of them
    pos-infra down          # stop both, and Airflow: no process is left behind
    pos-infra jars | schema | topics
    pos-infra airflow up|down|status|env   # local Airflow 3 (not part of `up`)
    pos-infra spark up|down|status         # local Spark standalone master + worker
    pos-infra cluster up|down|status|env|wipe  # 3 Kafka + 3 Cassandra nodes, 127.0.0.1-3
    pos-infra cassandra-role [--role pos]  # a secured cluster: the pipeline's role

`schema`, `topics` and `cassandra-role` are the product's own provisioning
(`pos-provision`, `pos_lambda.provision`), offered here too. Every subcommand has
--help. Configuration: POS_* environment variables (`python -m pos_lambda.settings`
prints them).
"""

from __future__ import annotations

import argparse
import sys
import time

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import ServiceError
from pos_lambda.provision.cli import (
    ROLE_HELP,
    add_role_arguments,
    cmd_cassandra_role,
    cmd_schema,
    cmd_topics,
)
from pos_lambda.settings import Settings, is_loopback, load_settings
from pos_lambda_dev.runtime import (
    airflow_service,
    cassandra_service,
    cluster,
    jars,
    kafka_service,
    spark_service,
)

SERVICES = {"kafka": kafka_service, "cassandra": cassandra_service}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_jars(settings: Settings, _: argparse.Namespace) -> int:
    fetched = jars.fetch(settings)
    _say(
        f"jars: {'fetched ' + ', '.join(fetched) if fetched else 'up to date'} "
        f"({settings.jars_dir})"
    )
    return 0


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    if not is_loopback(settings.bind_host):
        # The local runtime runs Kafka (PLAINTEXT) and Cassandra (AllowAllAuthenticator)
        # without any login: never where another machine can reach them.
        raise ServiceError(
            f"the local Kafka and Cassandra have no authentication, so they bind loopback "
            f"only (POS_BIND_HOST is {settings.bind_host!r}); for a shared host use the "
            "compose stack (docs/deploy.md) or your own secured clusters"
        )
    t0 = time.monotonic()
    jars.fetch(settings)
    for name in args.only or SERVICES:
        _say(f"{name}: starting ...")
        took = SERVICES[name].start(settings)
        _say(f"{name}: ready " + (f"in {took:.1f}s" if took else "(was already running)"))
    if not args.only or "cassandra" in args.only:
        n = schema_apply.apply_cql(settings)
        _say(
            f"cassandra: schema applied to keyspace '{settings.cassandra.keyspace}' "
            f"({n} statements)"
        )
    if not args.only or "kafka" in args.only:
        created = schema_apply.create_topics(settings)
        _say(f"kafka: topics {'created ' + ', '.join(created) if created else 'present'}")
    _say(f"up in {time.monotonic() - t0:.1f}s")
    return 0


def _stop_airflows(settings: Settings) -> None:
    """The state dir's Airflow and every one a run registered there and left running
    (airflow_service.owned: a test run killed before its teardown)."""
    (_, main), *left = airflow_service.stop_all(settings)
    _say(f"airflow: {'stopped' if main else 'was not running'}")
    for home, _ in left:
        _say(f"airflow: stopped the one at {home} (a run that started it did not stop it)")


def cmd_down(settings: Settings, _: argparse.Namespace) -> int:
    # Airflow first: its tasks use the other two. Then Cassandra: it is the slower to
    # flush and the larger to kill.
    _stop_airflows(settings)
    for name in ("cassandra", "kafka"):
        stopped = SERVICES[name].stop(settings)
        _say(f"{name}: {'stopped' if stopped else 'was not running'}")
    return 0


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    ok = True
    named = getattr(args, "service", None)
    for name, svc in SERVICES.items():
        if named and name != named:
            continue
        state = svc.status(settings)
        ok &= state.startswith("ready")
        print(f"{name:<10} {state}")
    return 0 if ok else 1


def cmd_airflow(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "up":
        _say("airflow: starting (migrates the metadata DB first) ...")
        took = airflow_service.start(settings)
        _say("airflow: ready " + (f"in {took:.1f}s" if took else "(was already running)"))
        _say(f"airflow: UI and API at {airflow_service.base_url(settings)}")
        creds = airflow_service.login(settings)
        if creds is None:
            _say(f"airflow: no generated password in {airflow_service.paths(settings).passwords}")
        else:
            _say(f"airflow: login {creds[0]} / {creds[1]}")
        return 0
    if args.action == "down":
        _stop_airflows(settings)
        return 0
    if args.action == "env":
        print(airflow_service.shell_exports(settings), end="")
        return 0
    state = airflow_service.status(settings)
    print(f"{'airflow':<10} {state}")
    return 0 if state.startswith("ready") else 1


def cmd_spark(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "up":
        _say("spark: starting a standalone master and worker ...")
        took = spark_service.start(settings)
        _say("spark: ready " + (f"in {took:.1f}s" if took else "(was already running)"))
        _say(f"spark: master UI and JSON state at {spark_service.webui_url(settings)}")
        _say(f"spark: jobs run there with POS_SPARK_MASTER={spark_service.master_url(settings)}")
        return 0
    if args.action == "down":
        stopped = spark_service.stop(settings)
        _say(f"spark: {'stopped' if stopped else 'was not running'}")
        return 0
    state = spark_service.status(settings)
    print(f"{'spark':<10} {state}")
    return 0 if state.startswith("ready") else 1


def cmd_cluster(settings: Settings, args: argparse.Namespace) -> int:
    layout = cluster.Layout()
    if args.action == "up":
        jars.fetch(settings)
        _say("cluster: starting 3 Kafka (KRaft) and 3 Cassandra nodes on 127.0.0.1-3 ...")
        took = cluster.up(settings, layout, say=_say)
        on_cluster = cluster.client_settings(settings, layout)
        n = schema_apply.apply_cql(on_cluster)
        _say(f"cassandra: schema applied at replication factor 3 ({n} statements)")
        created = schema_apply.create_topics(on_cluster)
        _say(f"kafka: topics {'created ' + ', '.join(created) if created else 'present'}")
        _say(f'cluster: up in {took:.1f}s; point a shell at it: eval "$(pos-infra cluster env)"')
        return 0
    if args.action == "down":
        stopped = cluster.down(settings)
        _say(f"cluster: {'stopped ' + ', '.join(stopped) if stopped else 'was not running'}")
        return 0
    if args.action == "env":
        print(cluster.shell_exports(layout), end="")
        return 0
    if args.action == "wipe":
        cluster.wipe(settings)
        _say(f"cluster: deleted {cluster.root(settings)}")
        return 0
    lines = cluster.status(settings, layout)
    for name, state in lines:
        print(f"{name:<12} {state}")
    all_up = all(state.startswith("running") for _, state in lines[:-2]) and all(
        state.startswith(f"{cluster.NODES}/") for _, state in lines[-2:]
    )
    return 0 if all_up else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("jars", help="fetch Kafka, Cassandra and Spark jars from Maven Central")
    up = sub.add_parser("up", help="start Kafka and Cassandra, apply schema, create topics")
    up.add_argument(
        "--only",
        choices=sorted(SERVICES),
        action="append",
        help="start just this service (repeatable)",
    )
    sub.add_parser(
        "down", help="stop Kafka, Cassandra and Airflow (its own, and any a killed test run left)"
    )
    status = sub.add_parser(
        "status",
        help="report readiness; exit 1 unless both (or the one named) are ready",
    )
    status.add_argument(
        "service",
        nargs="?",
        choices=sorted(SERVICES),
        help="just this service (a health check of one dependency, as compose's stand-ins use)",
    )
    sub.add_parser("schema", help="create the Cassandra keyspace and tables")
    sub.add_parser("topics", help="create the Kafka topics")
    add_role_arguments(sub.add_parser("cassandra-role", help=ROLE_HELP))
    airflow = sub.add_parser(
        "airflow",
        help="local Airflow 3: up (print URL and login), down (also any Airflow a killed "
        "test run left), status, env (export lines for running `airflow` by hand)",
    )
    airflow.add_argument("action", choices=["up", "down", "status", "env"])
    spark = sub.add_parser(
        "spark",
        help="local Spark standalone master + worker on 127.0.0.1 (the jobs use it with "
        "POS_SPARK_MASTER=spark://127.0.0.1:7077): up, down, status",
    )
    spark.add_argument("action", choices=["up", "down", "status"])
    cluster_cmd = sub.add_parser(
        "cluster",
        help="a replicated cluster on this machine: 3 KRaft brokers and 3 Cassandra nodes on "
        "127.0.0.1-3 (replication factor 3; docs/cluster.md): up (also schema and topics), "
        "down, status (exit 1 unless every node is up), env (export lines that point the "
        "pipeline at it), wipe (delete a stopped cluster's data)",
    )
    cluster_cmd.add_argument("action", choices=["up", "down", "status", "env", "wipe"])
    return parser


COMMANDS = {
    "jars": cmd_jars,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "schema": cmd_schema,
    "topics": cmd_topics,
    "airflow": cmd_airflow,
    "cassandra-role": cmd_cassandra_role,
    "spark": cmd_spark,
    "cluster": cmd_cluster,
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
