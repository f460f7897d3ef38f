"""Run a transactional processor (src/pos_lambda/transactional/processor.py) on a
`MemoryBroker` until its input is processed, restarting it as a supervisor would.

Each instance is one process (`broker.clients()`): `proc.run(stop)` runs until `stop`
says the input is all consumed, nothing is open and the group's committed offsets reached
the end of every input partition (or the instance has polled idle, or at all, too long).
An instance that exits non-zero, crashes (`Crash`, `Hang`) or dies of an exception is
replaced by a new one with the same transactional.id, from the broker's state, at most
`restarts` times. Then, faults off, one more restart catches up: the final state is what
any later instance would start from.

The shell's clock (`Processor.clock`) is the broker's virtual clock, so a transaction
closes after `transaction_max_ms` of virtual time, an empty poll's timeout passes at once
and a backoff costs nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pos_lambda.transactional.processor as shell
from tests.support.memory_kafka import (
    CRASH,
    CRASH_AFTER,
    HANG,
    Crash,
    MemoryBroker,
    MemoryClients,
    MemoryConsumer,
)

MakeProcessor = Callable[[MemoryClients], shell.Processor[Any]]


@dataclass
class Run:
    """What happened: one line per instance, and whether the input was caught up."""

    exits: list[str] = field(default_factory=list)
    caught_up: bool = False
    ids: tuple[str, str, str] = ("", "", "")  # group, input topic, transactional.id


def caught_up(broker: MemoryBroker, group: str, topic: str, transactional_id: str) -> bool:
    """Nothing open for this id, and the group committed past every readable input record."""
    if transactional_id in broker.open_txns:
        return False
    committed = broker.committed_offsets(group, topic)
    for partition in range(broker.partitions(topic)):
        readable = broker.read_committed(topic, partition)
        end = readable[-1].offset() + 1 if readable else 0
        if committed.get(partition, 0) < end:
            return False
    return True


class UntilCaughtUp(threading.Event):
    """The stop flag of one instance, set by the state of the broker (no thread)."""

    def __init__(
        self, broker: MemoryBroker, proc: shell.Processor[Any], max_idle_polls: int, max_polls: int
    ) -> None:
        super().__init__()
        self.broker, self.proc = broker, proc
        self.max_idle_polls, self.max_polls = max_idle_polls, max_polls
        self.gave_up = False

    def is_set(self) -> bool:
        consumer = self.proc.consumer
        assert isinstance(consumer, MemoryConsumer)
        if consumer.empty_polls > self.max_idle_polls or consumer.polls > self.max_polls:
            self.gave_up = True
            return True
        everything = {(self.proc.topic, p) for p in range(self.broker.partitions(self.proc.topic))}
        return set(consumer.fetches) == everything and caught_up(
            self.broker, self.proc.section.group_id, self.proc.topic, self.proc.job.transactional_id
        )


@contextmanager
def quiet() -> Iterator[None]:
    """The shell logs every abort and restart: silence it for runs by the thousand."""
    loggers = [logging.getLogger(name) for name in ("pos", "pos_lambda")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def run_instance(
    broker: MemoryBroker,
    make: MakeProcessor,
    run: Run,
    max_idle_polls: int = 30,
    max_polls: int = 5000,
    prefix: str = "",
) -> bool:
    """One process; True if it stopped caught up (exit 0, its stop flag did not give up)."""
    clients = broker.clients()
    proc: shell.Processor[Any] | None = None
    how, gave_up = "", False
    fired = len(broker.faults.fired)
    try:
        proc = make(clients)
        run.ids = (proc.section.group_id, proc.topic, proc.job.transactional_id)
        proc.clock = broker.clock
        proc.restart = _no_restart  # the watchdog never fires here (calls return at once)
        stop = UntilCaughtUp(broker, proc, max_idle_polls, max_polls)
        code = proc.run(stop)
        how, gave_up = f"exit {code}", stop.gave_up
    except Crash as exc:
        # The injected one (the shell's clean-up calls raise Crash again on the way out).
        killers = [f for f in broker.faults.fired[fired:] if f.kind in (CRASH, CRASH_AFTER, HANG)]
        how = f"{type(exc).__name__.lower()} ({killers[-1] if killers else exc})"
    except Exception as exc:  # a real process would die with this traceback
        how = f"died: {type(exc).__name__}: {exc}"
    finally:
        clients.kill()  # the process is gone; what it left open stays open
        if proc is not None:
            proc.watchdog.close()
    run.exits.append(prefix + how + (" (gave up waiting)" if gave_up else ""))
    return how == "exit 0" and not gave_up


def run_to_completion(
    broker: MemoryBroker,
    make: MakeProcessor,
    *,
    restarts: int = 12,
    max_idle_polls: int = 30,
    max_polls: int = 5000,
) -> Run:
    """Instances one after the other until one stops caught up, then a final one."""
    run = Run()
    for _ in range(restarts + 1):
        if run_instance(broker, make, run, max_idle_polls, max_polls):
            break
    broker.faults.armed = False  # the final restart: a supervisor's, on a calm day
    run_instance(broker, make, run, max_idle_polls, max_polls, prefix="final: ")
    run.caught_up = caught_up(broker, *run.ids)
    return run


def _no_restart(why: str) -> None:
    raise AssertionError(f"the watchdog fired in a unit test: {why}")
