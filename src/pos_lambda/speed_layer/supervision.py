"""What `pos-speed run` does about one of its drivers, event by event (pure).

The supervisor (speed_layer/supervisor.py) runs each driver in a process of its own and
starts it again when it dies. With POS_SPEED_STANDBY it also keeps a *standby* beside
it: a driver process that has started its Python, its JVM and its Spark session and
warmed up, and then waits for the supervisor's word without touching the query's
checkpoint, Kafka or the views. When the driver dies, the standby takes over: it starts
the query from the checkpoint at once, where a fresh process would first start all of
that while the records since the death wait.

`step(rules, slot, event)` is the decision: what happened (the driver or its standby
said it is ready, or died; the speed layer stops; a wait is over) and what to do about
it, in order. The supervisor watches the processes, turns what they do into events and
carries the actions out. Unit-tested with literal event sequences
(tests/unit/speed_layer/test_supervision.py).

- Every death of the driver counts against the restart budget (restart_policy.py),
  whether the standby or a fresh process takes over: a takeover is a restart. Its
  backoff applies to both (the standby waits meanwhile), but a driver killed by a
  signal is taken over at once: there is no cause outside to give time to.
- Whatever the dead driver left behind is ended before another one starts the query
  (`EndLeftovers`): two JVMs must never run the query on one checkpoint.
- A standby is started once the driver has said it is ready and `standby_after_ready_s`
  more have passed, never while a driver starts or replays: on two cores its start-up
  would slow the replay that users wait for.
- A standby that dies while it waits is started again, after a backoff that doubles
  with each of its deaths within the restart window (up to the window itself: a start
  that keeps failing must not keep a core busy); it never counts against the budget.
- On stop (SIGTERM, SIGINT; the supervisor signals every process) and once the budget is
  spent, the standby is ended too; the slot is finished when neither process is left,
  with the driver's exit status (the standby's does not count).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import Enum
from typing import TypeAlias

from pos_lambda.backoff import Backoff
from pos_lambda.speed_layer.restart_policy import (
    GiveUp,
    RestartPolicy,
    decide,
    describe_exit,
    exit_status,
    in_window,
)


class Phase(Enum):
    DOWN = "down"  # no process
    STARTING = "starting"  # a process that has not said it is ready (standing by) yet
    UP = "up"  # the driver said it is ready; the standby, that it stands by


@dataclass(frozen=True)
class SupervisionRules:
    """What does not change while `pos-speed run` runs."""

    name: str  # the driver's queries, for the log: "pos-speed-views"
    policy: RestartPolicy
    standby: bool = False  # keep a standby beside the driver
    one_shot: bool = False  # --available-now: the driver's exit 0 means done
    resume_hint: str = ""  # where the checkpoints are, for the give-up message
    # A new standby waits this long after its driver said it is ready: the driver's
    # first micro-batches (a replay after a takeover) get the cores. Started at once, a
    # standby's JVM and warm-up made a takeover's first micro-batch take 12 s.
    standby_after_ready_s: float = 0.0


@dataclass(frozen=True)
class Slot:
    """One driver and its standby, as the supervisor knows them."""

    driver: Phase = Phase.DOWN
    standby: Phase = Phase.DOWN
    deaths: tuple[float, ...] = ()  # the driver's, within the restart window
    restart_at: float | None = None  # a restart waits for its backoff until then
    restarts: int = 0  # times the query was started again (fresh or by a takeover)
    standby_deaths: tuple[float, ...] = ()  # the standbys', within the restart window
    standby_at: float = 0.0  # no standby starts before then (its backoff)
    stopping: bool = False
    exit_code: int = 0
    finished: bool = False


# Events: what happened, `at` seconds on one monotonic clock.


@dataclass(frozen=True)
class Begin:
    at: float


@dataclass(frozen=True)
class DriverReady:
    at: float


@dataclass(frozen=True)
class DriverDied:
    at: float
    code: int  # Popen.returncode: -N for signal N


@dataclass(frozen=True)
class StandingBy:
    at: float


@dataclass(frozen=True)
class StandbyDied:
    at: float
    code: int


@dataclass(frozen=True)
class TakeoverFailed:
    """The standby had died before it heard the word (its death not yet reported)."""

    at: float


@dataclass(frozen=True)
class Stop:
    at: float


@dataclass(frozen=True)
class Tick:
    """A wait the slot asked for (`wake_at`) may be over."""

    at: float


Event: TypeAlias = (
    Begin | DriverReady | DriverDied | StandingBy | StandbyDied | TakeoverFailed | Stop | Tick
)


# Actions: what the supervisor does, in order.


@dataclass(frozen=True)
class StartDriver:
    warm_up: bool  # False after a death: the replay waits for no warm-up


@dataclass(frozen=True)
class TakeOver:
    """Tell the standby to go: it starts the query and is the driver from now on."""


@dataclass(frozen=True)
class StartStandby:
    pass


@dataclass(frozen=True)
class EndStandby:
    """Stop the standby (SIGTERM): it leaves without having started anything."""


@dataclass(frozen=True)
class EndLeftovers:
    whose: str  # "driver" or "standby": whose death left them


@dataclass(frozen=True)
class Say:
    level: int  # logging.WARNING, ...
    text: str


@dataclass(frozen=True)
class Finish:
    code: int  # the slot's exit status


Action: TypeAlias = StartDriver | TakeOver | StartStandby | EndStandby | EndLeftovers | Say | Finish

# The shortest wait before a standby is started again, whatever the restart backoff:
# with POS_SPEED_RESTART_BACKOFF_SECONDS=0, a standby that dies at once would loop hot.
STANDBY_MIN_WAIT_S = 1.0


def standby_wait(policy: RestartPolicy, deaths: int) -> float:
    """The wait before the next standby, after `deaths` (>= 1) standby deaths within the
    window: the restart backoff (at least STANDBY_MIN_WAIT_S), doubled after each, up to
    the window itself."""
    first = max(policy.backoff_s, STANDBY_MIN_WAIT_S)
    return Backoff(first, cap_s=max(policy.window_s, first)).delay(deaths - 1)


def wake_at(rules: SupervisionRules, slot: Slot) -> float | None:
    """When the slot wants a `Tick` (a restart's backoff, a standby's), if it waits."""
    if slot.finished or slot.stopping:
        return None
    times = [] if slot.restart_at is None else [slot.restart_at]
    if _wants_standby(rules, slot):
        times.append(slot.standby_at)
    return min(times, default=None)


def step(rules: SupervisionRules, slot: Slot, event: Event) -> tuple[Slot, list[Action]]:
    """The slot after `event`, and what to do about it."""
    if slot.finished:
        return slot, []
    now = event.at
    match event:
        case Begin():
            return replace(slot, driver=Phase.STARTING), [StartDriver(warm_up=True)]
        case DriverReady() if slot.driver is Phase.STARTING:
            later = max(slot.standby_at, now + rules.standby_after_ready_s)
            return _standby_if_due(rules, replace(slot, driver=Phase.UP, standby_at=later), now, [])
        case StandingBy() if slot.standby is Phase.STARTING:
            return replace(slot, standby=Phase.UP), []
        case DriverDied(code=code):
            return _driver_died(rules, replace(slot, driver=Phase.DOWN), now, code)
        case StandbyDied(code=code):
            return _standby_died(rules, replace(slot, standby=Phase.DOWN), now, code, [])
        case TakeoverFailed():
            if slot.stopping:
                return _finish_if_done(replace(slot, driver=Phase.DOWN), [])
            slot, said = _standby_died(rules, slot, now, None, [])
            # The same restart, by a fresh process: counted once.
            return replace(slot, driver=Phase.STARTING), [*said, StartDriver(warm_up=False)]
        case Stop():
            return _finish_if_done(replace(slot, stopping=True, restart_at=None), [])
        case Tick():
            if slot.restart_at is not None and now >= slot.restart_at and not slot.stopping:
                return _restart(slot, [])
            return _standby_if_due(rules, slot, now, [])
    return slot, []  # a report that no longer matters (e.g. a second "ready")


def _driver_died(
    rules: SupervisionRules, slot: Slot, now: float, code: int
) -> tuple[Slot, list[Action]]:
    if slot.stopping:
        return _finish_if_done(replace(slot, exit_code=exit_status(code)), [])
    if rules.one_shot and code == 0:  # its run is done
        return _stop_for_good(slot, 0, [])
    policy = rules.policy
    deaths = in_window(policy, [*slot.deaths, now])
    slot = replace(slot, deaths=tuple(deaths))
    how = describe_exit(code)
    decision = decide(policy, deaths)
    if isinstance(decision, GiveUp):
        return _stop_for_good(
            slot,
            1,
            [
                Say(
                    logging.ERROR,
                    f"{rules.name}: driver {how}, its death {decision.deaths} within "
                    f"{policy.window_s:.0f} s: restart budget spent (POS_SPEED_MAX_RESTARTS="
                    f"{policy.max_restarts} within POS_SPEED_RESTART_WINDOW_SECONDS="
                    f"{policy.window_s:.0f}). Stopping the speed layer; fix the cause (see above) "
                    "and start `pos-speed run` again, or let a process manager do it: it resumes "
                    f"from its checkpoints under {rules.resume_hint}.",
                )
            ],
        )
    delay_s = decision.delay_s
    if code < 0 and slot.standby is not Phase.DOWN:
        # Killed by a signal: no cause outside to wait out (a query that failed exits
        # with a code, after its restarts in place), and the standby is already started.
        delay_s = 0.0
    said = Say(
        logging.WARNING,
        f"{rules.name}: driver {how}; restarting from its checkpoint in {delay_s:.0f} s "
        f"(restart {decision.nth} of {policy.max_restarts} within {policy.window_s:.0f} s)",
    )
    slot = replace(slot, restart_at=now + delay_s)
    if delay_s > 0:  # giving Cassandra or Kafka time to come back
        return slot, [said]
    return _restart(slot, [said])


def _restart(slot: Slot, actions: list[Action]) -> tuple[Slot, list[Action]]:
    """Start the query again: by the standby if there is one (even one still starting:
    it is further on than a fresh process), else by a fresh driver."""
    slot = replace(slot, restart_at=None, restarts=slot.restarts + 1, driver=Phase.STARTING)
    if slot.standby is not Phase.DOWN:
        return replace(slot, standby=Phase.DOWN), [*actions, EndLeftovers("driver"), TakeOver()]
    return slot, [*actions, EndLeftovers("driver"), StartDriver(warm_up=False)]


def _standby_died(
    rules: SupervisionRules, slot: Slot, now: float, code: int | None, actions: list[Action]
) -> tuple[Slot, list[Action]]:
    if slot.stopping:
        return _finish_if_done(slot, actions)
    deaths = in_window(rules.policy, [*slot.standby_deaths, now])
    wait = standby_wait(rules.policy, len(deaths))
    slot = replace(slot, standby_deaths=tuple(deaths), standby_at=now + wait)
    how = "had died before it heard the word" if code is None else describe_exit(code)
    said = Say(logging.WARNING, f"{rules.name}: standby {how}; another in {wait:.0f} s")
    return slot, [*actions, EndLeftovers("standby"), said]


def _wants_standby(rules: SupervisionRules, slot: Slot) -> bool:
    return (
        rules.standby
        and not slot.stopping
        and slot.driver is Phase.UP
        and slot.standby is Phase.DOWN
    )


def _standby_if_due(
    rules: SupervisionRules, slot: Slot, now: float, actions: list[Action]
) -> tuple[Slot, list[Action]]:
    if _wants_standby(rules, slot) and now >= slot.standby_at:
        return replace(slot, standby=Phase.STARTING), [*actions, StartStandby()]
    return slot, actions


def _stop_for_good(slot: Slot, code: int, actions: list[Action]) -> tuple[Slot, list[Action]]:
    slot = replace(slot, stopping=True, restart_at=None, exit_code=code)
    if slot.standby is not Phase.DOWN:
        actions = [*actions, EndStandby()]
    return _finish_if_done(slot, actions)


def _finish_if_done(slot: Slot, actions: list[Action]) -> tuple[Slot, list[Action]]:
    if slot.stopping and slot.driver is Phase.DOWN and slot.standby is Phase.DOWN:
        return replace(slot, finished=True), [*actions, Finish(slot.exit_code)]
    return slot, actions
