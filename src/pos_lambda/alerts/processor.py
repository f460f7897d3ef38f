"""The alerts processor: transactional read-process-write from `pos.transactions` to
`pos.alerts`, the alert rules (src/pos_lambda/alerts/rules.py) run by the shared shell
(src/pos_lambda/transactional/processor.py: transactions, KIP-447 offsets, state rebuilt
on assignment, fencing, lease, watchdog).

    pos-alerts run                      # one instance; start more with other POS_ALERTS_INSTANCE_ID
    make alerts

**Store hours** (the silence rule) come from the `stores` table, read once when the
instance starts (`store_calendar`, also after an in-place restart) and held for its
lifetime; an edit (`pos-stores set`, a new store) applies from the instance's next
restart (restart every instance: a rolling restart loses nothing). Why a snapshot and
not a periodic refresh: exactly once would hold either way (the rule state, the last
receipt per device, does not depend on the hours, so a rebuild is the same whatever
the calendar; a record's alerts are decided in the one transaction that commits its
offset), but with a snapshot the alerts are a function of the records and one calendar
per process: a replay after an abort re-emits the very same alerts (same bytes), and
which hours judged a receipt is known (logged at start, and in the alert's detail)
rather than a matter of when a refresh happened to land.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta

from pos_lambda.adapters.kafka_clients import KafkaClients
from pos_lambda.alerts.rules import AlertConfig, AlertStep, PartitionState
from pos_lambda.settings import Settings
from pos_lambda.stores.model import Store
from pos_lambda.stores.registry import StoreRegistry
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
    "store_calendar",
    "transactional_id",
]


log = logging.getLogger("pos.alerts")


def rules_from(settings: Settings, stores: Iterable[Store] = ()) -> AlertConfig:
    """The rules of the POS_ALERTS_* settings with `stores`' own hours (the calendar)."""
    return AlertConfig(
        high_value=settings.alerts.high_value_threshold,
        large_return=settings.alerts.large_return_threshold,
        silence=timedelta(minutes=settings.alerts.silence_minutes),
        store_opens=settings.alerts.store_opens_at,
        store_closes=settings.alerts.store_closes_at,
        stores={s.operation_id: s for s in stores},
    )


def store_calendar(registry: StoreRegistry) -> list[Store]:
    """Every registered store, read once at start (the module docstring says why once).

    Raises RegistryUnavailable (Cassandra down) and StoreError (a row hand-edited into
    something invalid): starting with hours other than the table's would alert wrongly.
    """
    stores = registry.all()
    log.info(
        "store hours: %d store(s) from the stores table (%s); any other store: the "
        "default window, UTC; an edit applies from the next restart",
        len(stores), ", ".join(f"{s.operation_id} {s.time_zone}" for s in stores) or "none",
    )  # fmt: skip
    return stores


def job(settings: Settings) -> Job:
    return Job(
        "alerts",
        settings.alerts,
        settings.topics.transactions,
        settings.topics.alerts,
        outputs="alerts",
        dead_letter_topic=settings.topics.dead_letters,
    )


def transactional_id(settings: Settings) -> str:
    return job(settings).transactional_id


class Processor(shell.Processor[PartitionState]):
    """One alerts processor instance. `run(stop)` returns an exit code."""

    def __init__(
        self,
        settings: Settings,
        rules: AlertConfig,
        restart: Callable[[str], None] | None = None,
        lease: Lease | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        super().__init__(settings, job(settings), AlertStep(rules), restart, lease, clients)
        self.rules = rules
