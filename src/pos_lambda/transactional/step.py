"""What a transactional processor runs: a pure step from a partition's state and one
input record to the records it produces.

The shell (src/pos_lambda/transactional/processor.py) owns Kafka, transactions, offsets and
rebuilding; a step owns the meaning. A step must be a pure function of the partition's
records in offset order (no clock, no I/O, no randomness): the shell rebuilds a
partition's state after a restart by applying the step to the records below the
committed offset and dropping its outputs, and that is only the state the previous owner
committed with if the step decides everything from the records themselves.

Steps: the alert rules (src/pos_lambda/alerts/processor.py) and the deduplicated topic
(src/pos_lambda/dedup/step.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

S = TypeVar("S")


@dataclass(frozen=True)
class Source:
    """Where an input record is: deterministic, so outputs may carry it."""

    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class Output:
    """One record to produce to the processor's output topic."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


class Step(Protocol[S]):
    """A step: a fresh partition state, and what one record does to it."""

    def initial(self) -> S:
        """The state of a partition before its first record."""
        ...

    def apply(self, state: S, value: bytes | None, source: Source) -> Sequence[Output]:
        """Feed one record (in offset order): update `state`, return what to produce."""
        ...
