"""A restart of Cassandra (kill -9, start): recovered when the node answers again."""

from __future__ import annotations

from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import StepFailed


class CassandraRestart(Fault[None]):
    name = "cassandra_restart"
    label = "Cassandra restart (kill -9, start)"
    slots = (4,)
    table_rank = 2

    def strike(self, run: Chaos) -> None:
        from pos_lambda_dev.runtime import cassandra_service

        if not cassandra_service.process(run.base).kill():
            raise StepFailed("Cassandra is not managed here (no pid file): cannot restart it")

    def await_recovery(self, run: Chaos, made: None) -> Survived:
        from pos_lambda_dev.runtime import cassandra_service

        took = cassandra_service.start(run.base)
        return Survived(f"node back in {took:.0f} s")


FAULT = CassandraRestart()
