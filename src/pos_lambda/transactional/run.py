"""`<command> run` of a transactional processor: signals, topics, lease, metrics, exit code.

Shared by `pos-alerts run` and `pos-receipts run`: each builds its settings and its
processor; this is the rest of the process's life around `Processor.run`.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from pos_lambda.adapters import kafka_admin
from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings
from pos_lambda.transactional.processor import EXIT_ID_IN_USE, Job, Processor


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM/SIGINT (the processor commits or aborts, then exits)."""
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a stuck instance
    # waits for (the JVM services answer jstack; this is the Python equivalent).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


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

    try:
        for topic in (job.input_topic, job.output_topic):
            kafka_admin.require_topic(
                settings.bootstrap_servers, topic, security=settings.kafka.security_config
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
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:  # neither fatal nor retriable: stop, say why
        print(f"error: Kafka: {exc}", file=sys.stderr)
        return 1


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
