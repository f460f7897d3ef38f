"""The chaos run's faults, one module each: how it is struck, how its recovery is
awaited, what it records, and where it stands in the run's schedule and the figures
table (`base.Fault`). This module finds them and builds the registry and the schedule.

Adding a fault is adding its module here: a class with a name, a label, its `slots`
(the schedule's next free places) and `table_rank`, `strike` and `await_recovery`, and
`FAULT = TheFault()`. The plan, the figures table, the strike and the tests follow.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from typing import Any

from pos_lambda_dev.demo.faults.base import Fault, Survived


def discovered(package: str = __name__, path: Iterable[str] = __path__) -> list[Fault[Any]]:
    """The `FAULT` of every module of this package (the helpers define none)."""
    found = []
    for info in pkgutil.iter_modules(list(path)):
        module = importlib.import_module(f"{package}.{info.name}")
        fault = getattr(module, "FAULT", None)
        if isinstance(fault, Fault):
            found.append(fault)
    return found


def schedule_of(found: list[Fault[Any]]) -> tuple[Fault[Any], ...]:
    """The faults in their slots' order; the slots must be 0..n-1, each taken once, so
    that a clash or a gap (two modules claiming one place) fails at import."""
    placed = sorted((slot, fault.name, fault) for fault in found for slot in fault.slots)
    slots = [slot for slot, _, _ in placed]
    if slots != list(range(len(slots))):
        taken = {slot: [n for s, n, _ in placed if s == slot] for slot in set(slots)}
        clashes = {s: names for s, names in taken.items() if len(names) > 1}
        raise ValueError(
            f"fault slots must be 0..{len(slots) - 1}, each once; clashes {clashes}, slots {slots}"
        )
    return tuple(fault for _, _, fault in placed)


def table_of(found: list[Fault[Any]]) -> tuple[Fault[Any], ...]:
    ranks = sorted(fault.table_rank for fault in found)
    if ranks != list(range(len(found))):
        raise ValueError(f"fault table ranks must be 0..{len(found) - 1}, each once: {ranks}")
    return tuple(sorted(found, key=lambda fault: fault.table_rank))


_FOUND = discovered()
# Every fault, in the order the figures table lists them.
FAULTS: tuple[Fault[Any], ...] = table_of(_FOUND)
# What one run strikes, as often as listed, in the order `figures.plan` shuffles with
# the seed.
SCHEDULE: tuple[Fault[Any], ...] = schedule_of(_FOUND)

# A plan names its faults (`figures.Planned.kind`); the run strikes the fault named.
BY_NAME: Mapping[str, Fault[Any]] = {f.name: f for f in FAULTS}


def named(name: str, registry: Mapping[str, Fault[Any]] = BY_NAME) -> Fault[Any]:
    """The fault a plan's `kind` names."""
    try:
        return registry[name]
    except KeyError:
        raise LookupError(f"no fault named {name!r}; faults: {', '.join(registry)}") from None


__all__ = ["BY_NAME", "FAULTS", "SCHEDULE", "Fault", "Survived", "named"]
