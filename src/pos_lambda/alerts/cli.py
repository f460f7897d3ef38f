"""`pos-alerts`: real-time alerts, exactly once, and their sink into Cassandra.

    pos-alerts run                           # processor instance 1 of group pos-alerts
    pos-alerts run --instance-id 2           # another instance: the group shares the partitions
    pos-alerts run --mode at_least_once      # no transactions (for comparison only)
    pos-alerts sink                          # pos.alerts (committed only) -> Cassandra `alerts`
    pos-alerts sink --until-caught-up        # ... what is committed now, then exit

`run` reads POS_TOPIC_TRANSACTIONS and writes alerts to POS_TOPIC_ALERTS in Kafka
transactions that also commit its input offsets (the shell of
src/pos_lambda/transactional/processor.py); the rules and their thresholds are the
POS_ALERTS_* settings (`python -m pos_lambda.settings`), flags override them. The
silence rule counts each store's own hours from the `stores` table (pos-stores), read
once at start: restart after editing it. Keep each running instance's id unique and
stable: a restarted instance with the same id fences its predecessor, and an instance
refuses to start while another live one holds its id (a lease in Cassandra,
transactional/lease.py; after a crash the restart waits at most POS_ALERTS_LEASE_TTL_S
for the dead holder's lease). SIGTERM/Ctrl-C commit (or abort) the open transaction and
exit.

Exit codes: 0 stopped on request, 1 Kafka/Cassandra unreachable or a topic missing,
2 bad arguments or settings (or an invalid row in the stores table), 3 a fatal Kafka
error, 4 fenced by a newer instance with the same id (both stop without writing
anything more), 5 another live instance holds this id (not started), 6 a Kafka call
hung again after POS_ALERTS_MAX_RESTARTS_IN_PLACE in-place restarts in a row.
"""

from __future__ import annotations

import argparse
import sys
import threading
from decimal import Decimal, InvalidOperation

from pydantic import ValidationError

from pos_lambda.adapters import kafka_admin
from pos_lambda.settings import Settings, load_settings
from pos_lambda.stores.model import Store, StoreError
from pos_lambda.stores.registry import CassandraStores, RegistryUnavailable
from pos_lambda.transactional.run import (
    EXIT_CONFIGURATION,
    EXIT_SERVICE,
    add_run_arguments,
    configuration_error,
    run_instance,
    run_overrides,
    service_errors_exit_1,
    start_logging,
    stop_on_signals,
)


def _decimal(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a decimal number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-alerts", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser(
        "run",
        help="run one processor instance (until SIGTERM/Ctrl-C)",
        description="Run one alerts processor instance until SIGTERM/Ctrl-C.",
    )
    add_run_arguments(run_p, "alerts")
    run_p.add_argument(
        "--high-value",
        type=_decimal,
        help="receipt total threshold (POS_ALERTS_HIGH_VALUE_THRESHOLD)",
    )
    run_p.add_argument(
        "--large-return",
        type=_decimal,
        help="returned value threshold (POS_ALERTS_LARGE_RETURN_THRESHOLD)",
    )
    run_p.add_argument(
        "--silence-minutes", type=float, help="device silence (POS_ALERTS_SILENCE_MINUTES)"
    )
    run_p.add_argument("--alerts-topic", help="POS_TOPIC_ALERTS")
    sink_p = sub.add_parser(
        "sink",
        help="copy committed alerts into Cassandra (until SIGTERM/Ctrl-C)",
        description="Copy committed alerts from POS_TOPIC_ALERTS into the Cassandra table "
        "`alerts`, keyed by alert id.",
    )
    sink_p.add_argument(
        "--until-caught-up",
        action="store_true",
        help="exit once every partition is read to its last committed alert",
    )
    sink_p.add_argument("--group-id", help="POS_ALERTS_SINK_GROUP_ID (pos-alerts-sink)")
    sink_p.add_argument("--alerts-topic", help="POS_TOPIC_ALERTS")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    if args.command == "sink":
        return load_settings(alerts_sink_group_id=args.group_id, topic_alerts=args.alerts_topic)
    return load_settings(
        **run_overrides(args, "alerts"),
        alerts_high_value_threshold=args.high_value,
        alerts_large_return_threshold=args.large_return,
        alerts_silence_minutes=args.silence_minutes,
        topic_alerts=args.alerts_topic,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_logging()
    try:
        settings = _settings(args)
        from pos_lambda.alerts.processor import rules_from

        rules_from(settings)  # checked here; `run` adds the stores' own hours
    except (ValidationError, ValueError) as exc:  # a bad flag or POS_* value
        return configuration_error(exc)
    stop = stop_on_signals()
    if args.command == "sink":
        return service_errors_exit_1(lambda: _sink(settings, stop, args.until_caught_up))
    from pos_lambda.alerts.processor import Processor, job

    try:
        rules = rules_from(settings, _store_calendar(settings))
    except StoreError as exc:
        # `set` field by field reads the row first, which a broken row fails: --repair.
        print(
            f"error: the stores table: {exc} (rewrite that row with pos-stores set "
            "OPERATION_ID --repair --name ... --zone ... --hours ...)",
            file=sys.stderr,
        )
        return EXIT_CONFIGURATION
    except RegistryUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SERVICE

    return run_instance(
        settings,
        job(settings),
        lambda lease: Processor(settings, rules, lease=lease),
        stop,
        "Alerts in committed transactions.",
    )


def _store_calendar(settings: Settings) -> list[Store]:
    """The stores table's stores, read once (processor.store_calendar)."""
    from pos_lambda.alerts.processor import store_calendar

    registry = CassandraStores(settings, writes=False)
    try:
        return store_calendar(registry)
    finally:
        registry.close()


def _sink(settings: Settings, stop: threading.Event, until_caught_up: bool) -> int:
    from pos_lambda.alerts.sink import run_sink

    kafka_admin.require_topic(
        settings.bootstrap_servers, settings.topics.alerts, security=settings.kafka.security_config
    )
    run_sink(settings, stop, until_caught_up=until_caught_up)
    return 0


if __name__ == "__main__":
    sys.exit(main())
