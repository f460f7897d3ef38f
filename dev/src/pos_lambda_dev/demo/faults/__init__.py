"""The chaos run's faults, one module each: how it is struck, how its recovery is
awaited, what it records (`base.Fault`). This module is their registry and the run's
schedule.

Adding a fault: a module here with its class and `FAULT = TheFault()` (a name, a label,
`strike`, `await_recovery`), then its line in `FAULTS` and its place in `SCHEDULE`
below. The plan, the figures table, the strike and the tests follow from these two.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pos_lambda_dev.demo.faults import (
    airflow_scheduler_kill,
    alerts_kill,
    batch_beside_dag,
    batch_kill,
    cassandra_outage,
    cassandra_restart,
    foreign_alert,
    kafka_restart,
    oversized_malformed,
    receipts_kill,
    speed_kill,
)
from pos_lambda_dev.demo.faults.base import Fault, Survived

# Every fault, in the order the figures table lists them.
FAULTS: tuple[Fault[Any], ...] = (
    speed_kill.FAULT,
    kafka_restart.FAULT,
    cassandra_restart.FAULT,
    cassandra_outage.FAULT,
    oversized_malformed.FAULT,
    foreign_alert.FAULT,
    alerts_kill.FAULT,
    receipts_kill.FAULT,
    batch_kill.FAULT,
    airflow_scheduler_kill.FAULT,
    batch_beside_dag.FAULT,
)

# What one run strikes, as often as listed, in the order `figures.plan` shuffles with
# the seed: this order is part of every seed's plan, so a new fault goes at the end.
SCHEDULE: tuple[Fault[Any], ...] = (
    speed_kill.FAULT,
    speed_kill.FAULT,
    speed_kill.FAULT,
    kafka_restart.FAULT,
    cassandra_restart.FAULT,
    batch_kill.FAULT,
    cassandra_outage.FAULT,
    oversized_malformed.FAULT,
    foreign_alert.FAULT,
    alerts_kill.FAULT,
    alerts_kill.FAULT,
    receipts_kill.FAULT,
    airflow_scheduler_kill.FAULT,
    batch_beside_dag.FAULT,
)

# A plan names its faults (`figures.Planned.kind`); the run strikes the fault named.
BY_NAME: Mapping[str, Fault[Any]] = {f.name: f for f in FAULTS}


def named(name: str, registry: Mapping[str, Fault[Any]] = BY_NAME) -> Fault[Any]:
    """The fault a plan's `kind` names."""
    try:
        return registry[name]
    except KeyError:
        raise LookupError(f"no fault named {name!r}; faults: {', '.join(registry)}") from None


__all__ = ["BY_NAME", "FAULTS", "SCHEDULE", "Fault", "Survived", "named"]
