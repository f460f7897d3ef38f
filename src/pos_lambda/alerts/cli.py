"""`pos-alerts`: real-time alerts, exactly once, and their sink into Cassandra.

    pos-alerts run                           # processor instance 1 of group pos-alerts
    pos-alerts run --instance-id 2           # another instance: the group shares the partitions
    pos-alerts run --mode at_least_once      # no transactions (for comparison only)
    pos-alerts sink                          # pos.alerts (committed only) -> Cassandra `alerts`
    pos-alerts sink --until-caught-up        # ... what is committed now, then exit

`run` reads POS_TOPIC_TRANSACTIONS and writes alerts to POS_TOPIC_ALERTS in Kafka
transactions that also commit its input offsets (see src/pos_lambda/alerts/processor.py); the rules
and their thresholds are the POS_ALERTS_* settings (`python -m pos_lambda.settings`), flags
override them. The silence rule counts each store's own hours from the `stores` table
(pos-stores), read once at start: restart after editing it. Keep each running
instance's id unique and stable: a restarted instance with the same id fences its
predecessor, and an instance refuses to start while another live one holds its id (a
lease in Cassandra, alerts/lease.py; after a crash the restart waits at most
POS_ALERTS_LEASE_TTL_S for the dead holder's lease). SIGTERM/Ctrl-C commit (or abort)
the open transaction and exit.

Exit codes: 0 stopped on request, 1 Kafka/Cassandra unreachable or a topic missing,
2 bad arguments or settings (or an invalid row in the stores table), 3 a fatal Kafka
error, 4 fenced by a newer instance with the same id (both stop without writing
anything more), 5 another live instance holds this id (not started), 6 a Kafka call
hung again after POS_ALERTS_MAX_RESTARTS_IN_PLACE in-place restarts in a row.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import threading
from decimal import Decimal, InvalidOperation
from typing import Any

from confluent_kafka import KafkaException
from pydantic import ValidationError

from pos_lambda.adapters import kafka_admin
from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings, explain, load_settings
from pos_lambda.stores.model import Store, StoreError
from pos_lambda.stores.registry import CassandraStores, RegistryUnavailable


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
    run_p.add_argument("--instance-id", help="stable id of this instance (POS_ALERTS_INSTANCE_ID)")
    run_p.add_argument("--group-id", help="consumer group (POS_ALERTS_GROUP_ID, pos-alerts)")
    run_p.add_argument(
        "--mode",
        choices=("exactly_once", "at_least_once"),
        help="POS_ALERTS_MODE (exactly_once)",
    )
    run_p.add_argument("--transaction-max-ms", type=int, help="POS_ALERTS_TRANSACTION_MAX_MS (100)")
    run_p.add_argument(
        "--transaction-max-messages", type=int, help="POS_ALERTS_TRANSACTION_MAX_MESSAGES (1000)"
    )
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
    run_p.add_argument("--input-topic", help="POS_TOPIC_TRANSACTIONS")
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
        alerts_instance_id=args.instance_id,
        alerts_group_id=args.group_id,
        alerts_mode=args.mode,
        alerts_transaction_max_ms=args.transaction_max_ms,
        alerts_transaction_max_messages=args.transaction_max_messages,
        alerts_high_value_threshold=args.high_value,
        alerts_large_return_threshold=args.large_return,
        alerts_silence_minutes=args.silence_minutes,
        topic_transactions=args.input_topic,
        topic_alerts=args.alerts_topic,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("cassandra").setLevel(logging.WARNING)
    try:
        settings = _settings(args)
        from pos_lambda.alerts.processor import rules_from

        rules = rules_from(settings)  # checked here; `run` adds the stores' own hours
    except (ValidationError, ValueError) as exc:  # a bad flag or POS_* value
        print(f"error: invalid configuration:\n{_explained(exc)}", file=sys.stderr)
        return 2
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a stuck instance
    # waits for (the JVM services answer jstack; this is the Python equivalent).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if args.command == "sink":
            from pos_lambda.alerts.sink import run_sink

            kafka_admin.require_topic(
                settings.bootstrap_servers,
                settings.topics.alerts,
                security=settings.kafka.security_config,
            )
            run_sink(settings, stop, until_caught_up=args.until_caught_up)
            return 0
        from pos_lambda.alerts.lease import IdInUse, Lease
        from pos_lambda.alerts.processor import EXIT_ID_IN_USE, Processor, transactional_id

        for topic in (settings.topics.transactions, settings.topics.alerts):
            kafka_admin.require_topic(
                settings.bootstrap_servers, topic, security=settings.kafka.security_config
            )
        # Before the processor touches Kafka: its init_transactions would fence a live
        # instance with this id (src/pos_lambda/alerts/lease.py).
        lease = Lease(settings, transactional_id(settings))
        try:
            lease.acquire()
        except IdInUse as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ID_IN_USE
        try:
            if stop.is_set():  # asked to stop while waiting for the lease
                return 0
            try:
                rules = rules_from(settings, _store_calendar(settings))
            except StoreError as exc:
                print(f"error: the stores table: {exc} (fix it with pos-stores set)",
                      file=sys.stderr)  # fmt: skip
                return 2
            processor = Processor(settings, rules, lease=lease)
            server = _serve_metrics(settings, processor)
            try:
                return processor.run(stop)
            finally:
                if server is not None:
                    server.shutdown()
        finally:
            lease.release()
    except (ServiceError, RegistryUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:  # neither fatal nor retriable: stop, say why
        print(f"error: Kafka: {exc}", file=sys.stderr)
        return 1


def _store_calendar(settings: Settings) -> list[Store]:
    """The stores table's stores, read once (processor.store_calendar)."""
    from pos_lambda.alerts.processor import store_calendar

    registry = CassandraStores(settings, writes=False)
    try:
        return store_calendar(registry)
    finally:
        registry.close()


def _serve_metrics(settings: Any, processor: Any) -> Any:
    """The processor's metrics on POS_ALERTS_METRICS_PORT (alerts/metrics.py)."""
    import time

    from pos_lambda.adapters import metrics_http
    from pos_lambda.alerts.metrics import AlertsCollector

    collector = AlertsCollector(
        lambda: processor.totals,
        str(settings.alerts.instance_id),
        settings.alerts.mode,
        time.time(),
    )
    return metrics_http.serve(
        metrics_http.registry_of(collector),
        settings.bind_host,
        settings.alerts.metrics_port,
        "pos-alerts",
    )


if __name__ == "__main__":
    sys.exit(main())


def _explained(exc: Exception) -> str:
    return explain(exc) if isinstance(exc, ValidationError) else str(exc)
