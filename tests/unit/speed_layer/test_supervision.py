"""What the supervisor does about one driver and its standby on each event (pure):
literal event sequences -> the actions, in order, and the state they leave."""

from __future__ import annotations

import logging
import signal

from pos_lambda.speed_layer.restart_policy import RestartPolicy
from pos_lambda.speed_layer.supervision import (
    Action,
    Begin,
    DriverDied,
    DriverReady,
    EndLeftovers,
    EndStandby,
    Event,
    Finish,
    Phase,
    Say,
    Slot,
    StandbyDied,
    StandingBy,
    StartDriver,
    StartStandby,
    Stop,
    SupervisionRules,
    TakeOver,
    TakeoverFailed,
    Tick,
    standby_wait,
    step,
    wake_at,
)

# 3 restarts within 60 s; 2 s, 4 s, ... up to 5 s between.
POLICY = RestartPolicy(max_restarts=3, window_s=60, backoff_s=2, backoff_max_s=5)
WITH_STANDBY = SupervisionRules("pos-speed-views", POLICY, standby=True, resume_hint="/ckpt")
WITHOUT = SupervisionRules("pos-speed-views", POLICY, standby=False, resume_hint="/ckpt")
KILLED = -signal.SIGKILL


def play(
    rules: SupervisionRules, events: list[Event], slot: Slot | None = None
) -> tuple[Slot, list[Action]]:
    """The slot after `events`, and every action they led to, in order."""
    slot = slot or Slot()
    done: list[Action] = []
    for event in events:
        slot, actions = step(rules, slot, event)
        done += actions
    return slot, done


def deeds(actions: list[Action]) -> list[Action]:
    """The actions but the log lines."""
    return [a for a in actions if not isinstance(a, Say)]


def said(actions: list[Action]) -> list[str]:
    return [a.text for a in actions if isinstance(a, Say)]


# A driver that is ready and its standby that stands by.
STANDING = play(WITH_STANDBY, [Begin(0), DriverReady(30), StandingBy(60)])[0]


def test_the_standby_starts_once_the_driver_is_ready_never_while_it_starts() -> None:
    slot, actions = play(WITH_STANDBY, [Begin(0)])
    assert actions == [StartDriver(warm_up=True)]
    assert wake_at(WITH_STANDBY, slot) is None  # no standby while the driver starts
    slot, actions = play(WITH_STANDBY, [DriverReady(30)], slot)
    assert actions == [StartStandby()]
    slot, actions = play(WITH_STANDBY, [StandingBy(60)], slot)
    assert actions == []
    assert (slot.driver, slot.standby) == (Phase.UP, Phase.UP)
    assert slot == STANDING


def test_a_new_standby_waits_after_its_driver_is_ready_so_the_replay_gets_the_cores() -> None:
    later = SupervisionRules("pos-speed-views", POLICY, standby=True, standby_after_ready_s=30)
    slot, actions = play(later, [Begin(0), DriverReady(10)])
    assert actions == [StartDriver(warm_up=True)]
    assert wake_at(later, slot) == 40
    slot, actions = play(later, [Tick(39)], slot)
    assert actions == []
    slot, actions = play(later, [Tick(40)], slot)
    assert actions == [StartStandby()]


def test_a_killed_driver_is_taken_over_by_its_standby_at_once_and_that_is_a_restart() -> None:
    slot, actions = play(WITH_STANDBY, [DriverDied(100, KILLED)], STANDING)
    assert actions == [
        Say(
            logging.WARNING,
            "pos-speed-views: driver killed by SIGKILL; restarting from its checkpoint in 0 s "
            "(restart 1 of 3 within 60 s)",
        ),
        EndLeftovers("driver"),  # its JVM ended before the standby starts the query
        TakeOver(),
    ]
    assert (slot.driver, slot.standby, slot.restarts) == (Phase.STARTING, Phase.DOWN, 1)
    # No new standby while the one that took over replays; one once it is ready.
    assert wake_at(WITH_STANDBY, slot) is None
    slot, actions = play(WITH_STANDBY, [DriverReady(108)], slot)
    assert actions == [StartStandby()]
    assert slot.restarts == 1


def test_a_standby_still_starting_takes_over_too() -> None:
    slot, actions = play(WITH_STANDBY, [Begin(0), DriverReady(30), DriverDied(31, 75)])
    assert deeds(actions) == [
        StartDriver(warm_up=True),
        StartStandby(),
        EndLeftovers("driver"),
        TakeOver(),  # it is further on than a fresh process; its warm-up is cut short
    ]
    assert slot.restarts == 1


def test_without_a_standby_a_fresh_driver_restarts_without_its_warm_up() -> None:
    slot, actions = play(WITHOUT, [Begin(0), DriverReady(30), DriverDied(100, KILLED)])
    assert deeds(actions) == [
        StartDriver(warm_up=True),
        EndLeftovers("driver"),
        StartDriver(warm_up=False),
    ]
    slot, actions = play(WITHOUT, [DriverReady(120)], slot)
    assert actions == []  # and never a standby
    assert wake_at(WITHOUT, slot) is None
    assert slot.restarts == 1


def test_the_backoff_applies_to_a_takeover_the_standby_waits_meanwhile() -> None:
    slot, _ = play(
        WITH_STANDBY, [DriverDied(100, KILLED), DriverReady(105), StandingBy(130)], STANDING
    )
    slot, actions = play(WITH_STANDBY, [DriverDied(140, 75)], slot)
    assert said(actions) == [
        "pos-speed-views: driver exited 75 (a query failed; its cause is logged above); "
        "restarting from its checkpoint in 2 s (restart 2 of 3 within 60 s)"
    ]
    assert deeds(actions) == []
    assert wake_at(WITH_STANDBY, slot) == 142
    slot, actions = play(WITH_STANDBY, [Tick(141)], slot)
    assert actions == []  # woken early: still waiting
    slot, actions = play(WITH_STANDBY, [Tick(142)], slot)
    assert actions == [EndLeftovers("driver"), TakeOver()]
    assert slot.restarts == 2


def test_a_second_kill_is_taken_over_at_once_the_backoff_is_for_failed_queries() -> None:
    slot, _ = play(
        WITH_STANDBY, [DriverDied(100, KILLED), DriverReady(105), StandingBy(130)], STANDING
    )
    slot, actions = play(WITH_STANDBY, [DriverDied(140, KILLED)], slot)
    assert said(actions) == [
        "pos-speed-views: driver killed by SIGKILL; restarting from its checkpoint in 0 s "
        "(restart 2 of 3 within 60 s)"
    ]
    assert deeds(actions) == [EndLeftovers("driver"), TakeOver()]
    # Without a standby, the second kill's fresh driver still waits its backoff.
    slot, _ = play(WITHOUT, [Begin(0), DriverReady(30), DriverDied(100, KILLED)])
    slot, actions = play(WITHOUT, [DriverReady(120), DriverDied(140, KILLED)], slot)
    assert deeds(actions) == []
    assert wake_at(WITHOUT, slot) == 142


def test_a_spent_budget_ends_the_standby_and_finishes_1_once_it_is_gone() -> None:
    never = SupervisionRules(
        "pos-speed-views", RestartPolicy(0, 60, 2, 30), standby=True, resume_hint="/c"
    )
    slot = play(never, [Begin(0), DriverReady(30), StandingBy(60)])[0]
    slot, actions = play(never, [DriverDied(100, KILLED)], slot)
    assert said(actions) == [
        "pos-speed-views: driver killed by SIGKILL, its death 1 within 60 s: restart budget "
        "spent (POS_SPEED_MAX_RESTARTS=0 within POS_SPEED_RESTART_WINDOW_SECONDS=60). Stopping "
        "the speed layer; fix the cause (see above) and start `pos-speed run` again, or let a "
        "process manager do it: it resumes from its checkpoints under /c."
    ]
    assert deeds(actions) == [EndStandby()]  # not yet finished: the standby still runs
    slot, actions = play(never, [StandbyDied(101, -signal.SIGTERM)], slot)
    assert actions == [Finish(1)]
    assert slot.finished


def test_a_dead_standby_is_started_again_after_a_doubling_backoff_outside_the_budget() -> None:
    slot, actions = play(WITH_STANDBY, [StandbyDied(100, KILLED)], STANDING)
    assert actions == [
        EndLeftovers("standby"),
        Say(logging.WARNING, "pos-speed-views: standby killed by SIGKILL; another in 2 s"),
    ]
    assert wake_at(WITH_STANDBY, slot) == 102
    slot, actions = play(WITH_STANDBY, [Tick(102)], slot)
    assert actions == [StartStandby()]
    # It dies again while starting (Cassandra away during its warm-up, say), and again.
    slot, actions = play(WITH_STANDBY, [StandbyDied(110, 75)], slot)
    assert said(actions) == [
        "pos-speed-views: standby exited 75 (a query failed; its cause is logged above); "
        "another in 4 s"
    ]
    slot, actions = play(WITH_STANDBY, [Tick(114), StandbyDied(120, 75)], slot)
    assert said(actions)[-1].endswith("another in 8 s")
    # The driver's budget is untouched.
    assert (slot.deaths, slot.restarts) == ((), 0)


def test_a_standby_is_started_again_no_sooner_than_a_second_and_no_later_than_the_window() -> None:
    assert [standby_wait(POLICY, n) for n in (1, 2, 3, 4, 5, 6, 7)] == [2, 4, 8, 16, 32, 60, 60]
    no_backoff = RestartPolicy(max_restarts=5, window_s=600, backoff_s=0, backoff_max_s=30)
    assert [standby_wait(no_backoff, n) for n in (1, 2, 3)] == [1, 2, 4]


def test_a_standby_waits_for_its_backoff_even_when_the_driver_becomes_ready() -> None:
    slot, _ = play(WITH_STANDBY, [StandbyDied(100, KILLED), DriverDied(101, KILLED)], STANDING)
    slot, actions = play(WITH_STANDBY, [DriverReady(101.5)], slot)  # the fresh driver
    assert actions == []
    assert wake_at(WITH_STANDBY, slot) == 102
    slot, actions = play(WITH_STANDBY, [Tick(102)], slot)
    assert actions == [StartStandby()]


def test_a_takeover_whose_standby_was_gone_starts_a_fresh_driver_as_the_same_restart() -> None:
    slot, actions = play(WITH_STANDBY, [DriverDied(100, KILLED)], STANDING)
    assert deeds(actions)[-1] == TakeOver()
    slot, actions = play(WITH_STANDBY, [TakeoverFailed(100.1)], slot)
    assert actions == [
        EndLeftovers("standby"),
        Say(
            logging.WARNING,
            "pos-speed-views: standby had died before it heard the word; another in 2 s",
        ),
        StartDriver(warm_up=False),
    ]
    assert (slot.driver, slot.restarts) == (Phase.STARTING, 1)


def test_a_stop_finishes_once_driver_and_standby_exited_with_the_drivers_status() -> None:
    slot, actions = play(WITH_STANDBY, [Stop(200), StandbyDied(201, -signal.SIGTERM)], STANDING)
    assert actions == []  # the standby's exit is no death: no restart, no log
    slot, actions = play(WITH_STANDBY, [DriverDied(203, 0)], slot)
    assert actions == [Finish(0)]
    # The driver first, then the standby; a driver that did not stop cleanly says so.
    slot, actions = play(
        WITH_STANDBY, [Stop(200), DriverDied(201, KILLED), StandbyDied(202, 0)], STANDING
    )
    assert actions == [Finish(137)]


def test_a_stop_during_the_backoff_starts_nothing() -> None:
    _, actions = play(
        WITHOUT, [Begin(0), DriverDied(10, 75), DriverDied(11, 75), Stop(12), Tick(13)]
    )
    assert deeds(actions) == [
        StartDriver(warm_up=True),
        EndLeftovers("driver"),
        StartDriver(warm_up=False),
        Finish(0),  # the second death's 2 s backoff was cut short by the stop
    ]


def test_any_death_is_restarted_until_the_budget_is_spent_then_1() -> None:
    # SIGKILL, a failed query, an unexpected exit 0, SIGTERM from outside: 4 deaths in 60 s.
    _, actions = play(
        WITHOUT,
        [
            Begin(0),
            DriverDied(10, KILLED),
            DriverDied(20, 75),
            Tick(22),
            DriverDied(30, 0),
            Tick(34),
            DriverDied(40, -signal.SIGTERM),
        ],
    )
    assert [a for a in deeds(actions) if isinstance(a, StartDriver | Finish)] == [
        StartDriver(warm_up=True),
        StartDriver(warm_up=False),  # the first restart immediate
        StartDriver(warm_up=False),  # after 2 s
        StartDriver(warm_up=False),  # after 4 s
        Finish(1),
    ]
    assert "pos-speed-views: driver killed by SIGTERM, its death 4 within 60 s" in said(actions)[-1]


def test_a_one_shot_drivers_exit_0_is_done_and_its_kill_is_restarted() -> None:
    once = SupervisionRules("pos-speed-layer", POLICY, standby=False, one_shot=True)
    slot, actions = play(once, [Begin(0), DriverDied(10, KILLED), DriverReady(11)])
    assert deeds(actions) == [
        StartDriver(warm_up=True),
        EndLeftovers("driver"),
        StartDriver(warm_up=False),
    ]
    slot, actions = play(once, [DriverDied(40, 0)], slot)
    assert actions == [Finish(0)]


def test_reports_that_no_longer_matter_change_nothing() -> None:
    # A second "ready", a "standing by" from no standby, anything after the finish.
    assert play(WITH_STANDBY, [DriverReady(70)], STANDING) == (STANDING, [])
    slot = play(WITH_STANDBY, [StandbyDied(100, KILLED)], STANDING)[0]
    assert play(WITH_STANDBY, [StandingBy(101)], slot) == (slot, [])
    done = play(WITHOUT, [Begin(0), Stop(1), DriverDied(2, 0)])[0]
    assert done.finished
    assert play(WITHOUT, [DriverDied(3, KILLED), Tick(4)], done) == (done, [])
