"""The alerts processor: transactional read-process-write from `pos.transactions` to
`pos.alerts`, the alert rules (src/pos_lambda/alerts/rules.py) run by the shared shell
(src/pos_lambda/transactional/processor.py: transactions, KIP-447 offsets, state rebuilt
on assignment, fencing, lease, watchdog).

    pos-alerts run                      # one instance; start more with other POS_ALERTS_INSTANCE_ID
    make alerts
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from pos_lambda.alerts.rules import AlertStep, PartitionState, Rules
from pos_lambda.settings import Settings
from pos_lambda.transactional import processor as shell
from pos_lambda.transactional.lease import Lease
from pos_lambda.transactional.processor import (
    EXIT_FATAL,
    EXIT_FENCED,
    EXIT_ID_IN_USE,
    EXIT_RESTARTS_EXHAUSTED,
    Fatal,
    Job,
    classify,
)

__all__ = [
    "EXIT_FATAL",
    "EXIT_FENCED",
    "EXIT_ID_IN_USE",
    "EXIT_RESTARTS_EXHAUSTED",
    "Fatal",
    "Processor",
    "classify",
    "job",
    "rules_from",
    "transactional_id",
]


def rules_from(settings: Settings) -> Rules:
    return Rules(
        high_value=settings.alerts.high_value_threshold,
        large_return=settings.alerts.large_return_threshold,
        silence=timedelta(minutes=settings.alerts.silence_minutes),
        store_opens=settings.alerts.store_opens_at,
        store_closes=settings.alerts.store_closes_at,
    )


def job(settings: Settings) -> Job:
    return Job(
        "alerts",
        settings.alerts,
        settings.topics.transactions,
        settings.topics.alerts,
        outputs="alerts",
    )


def transactional_id(settings: Settings) -> str:
    return job(settings).transactional_id


class Processor(shell.Processor[PartitionState]):
    """One alerts processor instance. `run(stop)` returns an exit code."""

    def __init__(
        self,
        settings: Settings,
        rules: Rules,
        restart: Callable[[str], None] | None = None,
        lease: Lease | None = None,
    ) -> None:
        super().__init__(settings, job(settings), AlertStep(rules), restart, lease)
        self.rules = rules
