"""A hard restart of the Kafka broker (kill -9, start): recovered when it answers again
(every client rides it out: the producer's idempotent retries, the drivers' and
processors' reconnects)."""

from __future__ import annotations

from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import StepFailed


class KafkaRestart(Fault[None]):
    name = "kafka_restart"
    label = "Kafka broker hard restart (kill -9, start)"
    slots = (3,)
    table_rank = 1

    def strike(self, run: Chaos) -> None:
        from pos_lambda_dev.runtime import kafka_service

        if not kafka_service.process(run.base).kill():
            raise StepFailed("Kafka is not managed here (no pid file): cannot restart it")

    def await_recovery(self, run: Chaos, made: None) -> Survived:
        from pos_lambda_dev.runtime import kafka_service

        took = kafka_service.start(run.base)
        return Survived(f"broker back in {took:.0f} s")


FAULT = KafkaRestart()
