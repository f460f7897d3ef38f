"""`<command> run` of a transactional processor: flags, logging, signals, topics, lease,
metrics, exit codes.

Shared by `pos-alerts run` and `pos-receipts run`: each adds its own flags and builds its
processor; this is the rest of the process's life around `Processor.run`.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from pydantic import ValidationError

from pos_lambda.adapters import kafka_admin
from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings, explain
from pos_lambda.transactional.processor import EXIT_ID_IN_USE, Job, Processor

EXIT_SERVICE = 1  # Kafka/Cassandra unreachable, a topic missing
EXIT_CONFIGURATION = 2  # a bad flag or POS_* value


def add_run_arguments(run: argparse.ArgumentParser, name: str) -> None:
    """The flags every `pos-<name> run` has, each overriding its POS_<NAME>_* setting."""
    env = f"POS_{name.upper()}_"
    run.add_argument("--instance-id", help=f"stable id of this instance ({env}INSTANCE_ID)")
    run.add_argument("--group-id", help=f"consumer group ({env}GROUP_ID, pos-{name})")
    run.add_argument(
        "--mode",
        choices=("exactly_once", "at_least_once"),
        help=f"{env}MODE (exactly_once; at_least_once for comparison only)",
    )
    run.add_argument("--transaction-max-ms", type=int, help=f"{env}TRANSACTION_MAX_MS (100)")
    run.add_argument(
        "--transaction-max-messages", type=int, help=f"{env}TRANSACTION_MAX_MESSAGES (1000)"
    )
    run.add_argument("--input-topic", help="POS_TOPIC_TRANSACTIONS")


def run_overrides(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The settings `add_run_arguments`' flags override, by their flat names."""
    return {
        f"{name}_instance_id": args.instance_id,
        f"{name}_group_id": args.group_id,
        f"{name}_mode": args.mode,
        f"{name}_transaction_max_ms": args.transaction_max_ms,
        f"{name}_transaction_max_messages": args.transaction_max_messages,
        "topic_transactions": args.input_topic,
    }


def start_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("cassandra").setLevel(logging.WARNING)


def configuration_error(exc: Exception) -> int:
    """Say what is wrong with a flag or POS_* value (by its variable); the exit code."""
    detail = explain(exc) if isinstance(exc, ValidationError) else str(exc)
    print(f"error: invalid configuration:\n{detail}", file=sys.stderr)
    return EXIT_CONFIGURATION


def service_errors_exit_1(work: Callable[[], int]) -> int:
    """`work()`'s exit code, or 1 (saying why) when a service or a topic is missing."""
    try:
        return work()
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SERVICE
    except KafkaException as exc:  # neither fatal nor retriable: stop, say why
        print(f"error: Kafka: {exc}", file=sys.stderr)
        return EXIT_SERVICE


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM/SIGINT (the processor commits or aborts, then exits)."""
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a stuck instance
    # waits for (the JVM services answer jstack; this is the Python equivalent).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def await_kafka_after_restart(
    settings: Settings,
    patience_s: float,
    answers: Callable[[], bool] | None = None,
    wait: Callable[..., bool] | None = None,
) -> bool:
    """After a restart in place (its watchdog's: a call hung because the coordinator's
    broker went away), the broker may still be away: wait up to `patience_s` for Kafka
    to answer rather than exit 1 at the first topic check, as a process an operator starts
    does. True when it answers (or no wait was needed)."""
    from pos_lambda.adapters.service import wait_for
    from pos_lambda.transactional import watchdog

    if watchdog.restarts()[1] == 0:
        return True

    def kafka_answers() -> bool:
        try:
            kafka_admin.existing_topics(
                settings.bootstrap_servers, 5.0, settings.kafka.security_config
            )
            return True
        except ServiceError:
            return False

    probe = answers or kafka_answers
    if probe():
        return True
    logging.getLogger("pos.processor").warning(
        "restarted in place with Kafka at %s away: waiting up to %.0f s for it",
        settings.bootstrap_servers, patience_s,
    )  # fmt: skip
    return (wait or wait_for)(probe, timeout=patience_s, interval=1.0)


def run_instance(
    settings: Settings,
    job: Job,
    build: Callable[[Any], Processor[Any]],
    stop: threading.Event,
    outputs_help: str,
) -> int:
    """Run one instance of `job` until `stop`; its exit code. `build(lease)` makes the
    processor; `outputs_help` describes its outputs' counter in the metrics."""
    from pos_lambda.transactional.lease import IdInUse, Lease

    def run() -> int:
        await_kafka_after_restart(settings, job.section.coordinator_wait_s)
        for topic in (job.input_topic, job.output_topic):
            kafka_admin.require_topic(
                settings.bootstrap_servers, topic, security=settings.kafka.security_config
            )
        # Written only when the broker refuses an output for good (transactional/
        # refused.py): created here if missing, so that a dead letter never waits for it.
        kafka_admin.require_topic(
            settings.bootstrap_servers,
            job.dead_letter_topic,
            create_partitions=settings.topics.partitions,
            replication_factor=settings.topics.replication_factor,
            security=settings.kafka.security_config,
        )
        # Before the processor touches Kafka: its init_transactions would fence a live
        # instance with this id (src/pos_lambda/transactional/lease.py).
        lease = Lease(
            settings,
            job.transactional_id,
            job.section.lease_ttl_s,
            f"{job.env_prefix}INSTANCE_ID (`pos-{job.name} run --instance-id N`)",
        )
        try:
            lease.acquire()
        except IdInUse as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ID_IN_USE
        try:
            if stop.is_set():  # asked to stop while waiting for the lease
                return 0
            processor = build(lease)
            server = _serve_metrics(settings, job, processor, outputs_help)
            try:
                return processor.run(stop)
            finally:
                if server is not None:
                    server.shutdown()
        finally:
            lease.release()

    return service_errors_exit_1(run)


def _serve_metrics(
    settings: Settings, job: Job, processor: Processor[Any], outputs_help: str
) -> Any:
    """The processor's metrics on its section's metrics_port (transactional/metrics.py)."""
    from pos_lambda.adapters import metrics_http
    from pos_lambda.transactional.metrics import ProcessorCollector

    collector = ProcessorCollector(
        lambda: processor.totals,
        str(job.section.instance_id),
        job.section.mode,
        time.time(),
        job.name,
        outputs_help,
    )
    return metrics_http.serve(
        metrics_http.registry_of(collector),
        settings.bind_host,
        job.section.metrics_port,
        f"pos-{job.name}",
    )
