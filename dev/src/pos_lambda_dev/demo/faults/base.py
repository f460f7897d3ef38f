"""What a fault of the chaos run is: a name and a label, how it is struck, how its
recovery is awaited, what it records (`Survived`), and what a failed run must undo.

The run (`pos_lambda_dev.demo.chaos.strike`) calls `strike`, then `await_recovery` with
what `strike` returned (a pid, offsets, a time: whatever the recovery compares with),
and files the record as a `figures.Outcome`. Both get the run's context (`Chaos`:
settings, processes and their watch, logs, deadline) and raise `StepFailed` when the
fault cannot be made or the pipeline does not recover within `--step-timeout`. The
run's cleanup calls `restore` of every planned fault, struck or not, even after a
failure.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from pos_lambda_dev.demo.chaos_context import Chaos

# What a strike hands its recovery: each fault's own (a pid, offsets, a time).
Made = TypeVar("Made")


@dataclass(frozen=True)
class Survived:
    """What a fault records: what happened, and how long the pipeline took to work
    again. `recovered_s` None: the run measures it from the strike's start (a fault
    that knows when it struck, e.g. a kill after a wait for its moment, gives its own)."""

    detail: str
    recovered_s: float | None = None


class Fault(ABC, Generic[Made]):
    name: ClassVar[str]  # the plan's kind and the figures' key, e.g. "speed_kill"
    label: ClassVar[str]  # how the figures table names it
    # Its places in the run's schedule (0, 1, ...: as often as it strikes per run). The
    # seeded shuffle draws from the schedule in this order, so a new fault takes the
    # places after the last one and every seed's plan of the others stays the same.
    slots: ClassVar[tuple[int, ...]]
    table_rank: ClassVar[int]  # its row in the figures table (0 first)

    def prepare(self, run: Chaos) -> str:
        """Wait for what the fault needs before the stream passes its point (the stream is
        held meanwhile, so the fault still strikes while it flows); say what, if anything."""
        return ""

    @abstractmethod
    def strike(self, run: Chaos) -> Made:
        """Make the fault (waiting for its moment first if it needs one)."""

    @abstractmethod
    def await_recovery(self, run: Chaos, made: Made) -> Survived:
        """Wait until the pipeline works again after `made`; say how."""

    def restore(self, run: Chaos) -> None:  # most faults leave nothing behind
        """Undo what the fault may have left if the run failed between its strike and
        its recovery (a node still stopped, a process paused). Harmless when there is
        nothing to undo. The run's cleanup already starts Kafka and Cassandra again and
        stops every process it started."""
