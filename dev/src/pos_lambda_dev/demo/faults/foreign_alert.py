"""A record that is no alert, written to the alerts topic by someone else: the sink must
skip it and go on (recovered when the sink's group is past it), and the auditor must
report it without taking it for the pipeline's output."""

from __future__ import annotations

import contextlib
from typing import Any

from pos_lambda_dev.demo import steps
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import (
    VENV_BIN,
    StepFailed,
    await_or_fail,
    start_logged,
    stop_gracefully,
    tail,
)


class ForeignAlert(Fault[tuple[int, int]]):
    name = "foreign_alert"
    label = "a foreign record on the alerts topic"
    slots = (8,)
    table_rank = 5

    def strike(self, run: Chaos) -> tuple[int, int]:
        """The record written; where it is (partition, offset)."""
        from pos_lambda.adapters.kafka_clients import ConfluentClients

        s = run.settings
        client = ConfluentClients.from_settings(s).producer()
        where: list[tuple[int, int]] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                where.append((int(msg.partition()), int(msg.offset())))

        client.produce(
            s.topics.alerts, key=b"not-an-alert", value=b'{"hello": "from elsewhere"}',
            on_delivery=delivered,
        )  # fmt: skip
        if client.flush(60) != 0 or not where:
            raise StepFailed("the foreign record was not acknowledged by Kafka")
        return where[0]

    def await_recovery(self, run: Chaos, made: tuple[int, int]) -> Survived:
        s = run.settings
        partition, offset = made

        def past_it() -> bool:
            with contextlib.suppress(Exception):  # no commit yet, a coordinator moving
                got = steps.committed(s, s.alerts.sink_group_id, s.topics.alerts)
                return got.get(partition, -1) > offset
            return False

        sink = start_logged(
            [str(VENV_BIN / "pos-alerts"), "sink"], run.env, run.log("alerts-sink-foreign")
        )
        run.procs.append(sink)
        try:
            await_or_fail(
                lambda: past_it() or sink.poll() is not None,
                run.args.step_timeout, "the alerts sink to pass the foreign record",
            )  # fmt: skip
            if sink.poll() is not None:
                raise StepFailed(
                    f"the alerts sink exited {sink.returncode} on a foreign record; log "
                    f"{run.log('alerts-sink-foreign')}:\n{tail(run.log('alerts-sink-foreign'))}"
                )
        finally:
            stop_gracefully(sink, 60)
        return Survived(
            f"at {s.topics.alerts} [{partition}] @{offset}: skipped by the sink, which went on"
        )


FAULT = ForeignAlert()
