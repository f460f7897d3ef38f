"""The chaos run's faults as a registry and a schedule: every planned name is one fault,
every fault module is registered and scheduled, and a fault the run has never seen (a
fake) is struck, awaited and recorded by the same run."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda_dev.demo import chaos, chaos_context, faults, figures
from pos_lambda_dev.demo.faults import Fault, Survived

# Today's schedule, literally: the order the seeded shuffle draws from, so every seed's
# plan (and the runs and figures made with it) stays the same.
SCHEDULE_TODAY = (
    "speed_kill", "speed_kill", "speed_kill", "kafka_restart", "cassandra_restart",
    "batch_kill", "cassandra_outage", "oversized_malformed", "foreign_alert",
    "alerts_kill", "alerts_kill", "receipts_kill", "airflow_scheduler_kill",
    "batch_beside_dag",
)  # fmt: skip


def test_every_planned_fault_name_resolves_to_exactly_one_fault() -> None:
    names = [f.name for f in faults.FAULTS]
    assert len(names) == len(set(names)) == 11
    for name in figures.STREAM_FAULTS:
        assert [f for f in faults.FAULTS if f.name == name] == [faults.named(name)]
    with pytest.raises(LookupError, match="no fault named 'disk_full'"):
        faults.named("disk_full")


def test_the_schedule_is_todays_fourteen_faults_in_todays_order() -> None:
    assert figures.STREAM_FAULTS == SCHEDULE_TODAY
    # The default run's plan (seed 13), as drawn before the faults became objects.
    assert [(f.kind, f.at) for f in figures.plan(13).faults] == [
        ("foreign_alert", 0.0898), ("oversized_malformed", 0.1142), ("speed_kill", 0.1758),
        ("airflow_scheduler_kill", 0.2584), ("batch_kill", 0.3299), ("speed_kill", 0.3868),
        ("cassandra_outage", 0.4367), ("alerts_kill", 0.4596), ("kafka_restart", 0.5492),
        ("speed_kill", 0.6106), ("receipts_kill", 0.6391), ("alerts_kill", 0.7049),
        ("batch_beside_dag", 0.7614), ("cassandra_restart", 0.8049),
    ]  # fmt: skip


def test_every_fault_module_is_registered_and_scheduled() -> None:
    # A module with a FAULT that the registry misses would never strike.
    defined = []
    for info in pkgutil.iter_modules(faults.__path__):
        module = importlib.import_module(f"{faults.__name__}.{info.name}")
        if hasattr(module, "FAULT"):
            defined.append(module.FAULT)
    assert sorted(f.name for f in defined) == sorted(f.name for f in faults.FAULTS)
    assert {f.name for f in faults.SCHEDULE} == {f.name for f in faults.FAULTS}
    for fault in faults.FAULTS:
        assert isinstance(fault, Fault)
        assert fault.label == figures.LABELS[fault.name]


class Fake(Fault[int]):
    """A fault the run has never seen: counts its strikes, recovers at once."""

    name = "fake"
    label = "a fake fault"

    def __init__(self, recovered_s: float | None = None) -> None:
        self.strikes = 0
        self.awaited: list[int] = []
        self.restored = 0
        self.recovered_s = recovered_s

    def strike(self, run: chaos_context.Chaos) -> int:
        self.strikes += 1
        return self.strikes

    def await_recovery(self, run: chaos_context.Chaos, made: int) -> Survived:
        self.awaited.append(made)
        return Survived(f"struck {made} time(s)", self.recovered_s)

    def restore(self, run: chaos_context.Chaos) -> None:
        self.restored += 1


def _run(plan: figures.Plan, said: list[str], tmp_path: Path) -> Any:
    # No settings: a fake fault, and the watch over no process, read none.
    run: Any = chaos_context.Chaos(
        None, None, argparse.Namespace(logs=tmp_path, timeout=60), said.append, plan
    )
    return run


def test_a_fake_fault_is_struck_awaited_and_recorded(tmp_path: Path) -> None:
    fake = Fake(recovered_s=4.2)
    said: list[str] = []
    run = _run(figures.Plan([]), said, tmp_path)
    run.stream = chaos_context.Counting([OutgoingMessage(b"k", b"v", 0, "receipt")] * 10)
    run.stream.sent = 7
    chaos.strike(run, figures.Planned("fake", 0.7), {"fake": fake})
    assert (fake.strikes, fake.awaited) == (1, [1])  # the strike's value, to its recovery
    assert run.outcomes == [figures.Outcome("fake", 7, 4.2, "struck 1 time(s)")]
    assert said == [
        "fault: a fake fault at message 7 ...",
        "fault: survived (struck 1 time(s); 4 s)",
    ]


def test_without_its_own_time_a_faults_recovery_is_measured_from_its_strike(
    tmp_path: Path,
) -> None:
    run = _run(figures.Plan([]), [], tmp_path)
    chaos.strike(run, figures.Planned("fake", 0.1), {"fake": Fake()})
    [outcome] = run.outcomes
    assert outcome.recovered_s is not None and 0 <= outcome.recovered_s < 5


def test_a_fake_fault_can_be_scheduled_and_the_storm_strikes_the_plan_in_order(
    tmp_path: Path,
) -> None:
    import time

    class Other(Fake):
        name = "other"

    fake, other = Fake(1.0), Other(2.0)
    registry = {"fake": fake, "other": other}
    plan = figures.plan(7, faults=("fake", "other", "fake"), window=(0.0, 1.0))
    run = _run(plan, [], tmp_path)
    run.deadline = time.monotonic() + 60
    messages = [OutgoingMessage(b"k", b"v", 0, "receipt")] * 100
    run.stream = chaos_context.Counting(messages)
    run.stream.sent = len(messages)  # the stream is over: each fault strikes at once
    producer = threading.Thread(target=lambda: None)
    producer.errors = []  # what produce_in_background's thread carries
    producer.start()
    producer.join()
    chaos.storm(run, producer, len(messages), registry)
    assert [o.kind for o in run.outcomes] == [p.kind for p in plan.faults]
    assert Counter(o.kind for o in run.outcomes) == {"fake": 2, "other": 1}
    assert (fake.awaited, other.awaited) == ([1, 2], [1])
    chaos.restore_faults(run, registry)
    assert (fake.restored, other.restored) == (1, 1)  # once per fault, not per strike


def test_a_fault_that_cannot_undo_itself_does_not_stop_the_others(tmp_path: Path) -> None:
    class Stuck(Fake):
        name = "stuck"

        def restore(self, run: chaos_context.Chaos) -> None:
            raise RuntimeError("node still paused")

    fake = Fake()
    said: list[str] = []
    run = _run(figures.Plan([figures.Planned("stuck", 0.1), figures.Planned("fake", 0.2)]),
               said, tmp_path)  # fmt: skip
    chaos.restore_faults(run, {"stuck": Stuck(), "fake": fake})
    assert said == ["cleanup: could not undo stuck: node still paused"]
    assert fake.restored == 1
    run.plan = figures.Plan([figures.Planned("gone", 0.1), figures.Planned("fake", 0.2)])
    said.clear()
    chaos.restore_faults(run, {"fake": fake})  # a name no fault has: said, not raised
    assert said == ["cleanup: could not undo gone: no fault named 'gone'; faults: fake"]
    assert fake.restored == 2


def _fault(name: str, slots: tuple[int, ...], rank: int) -> Fault[Any]:
    cls = type(name.title(), (Fake,), {"name": name, "slots": slots, "table_rank": rank})
    made: Fault[Any] = cls()
    return made


def test_a_new_fault_is_one_module_that_takes_the_next_slots() -> None:
    # A fault added as a module of its own, with the places after today's last one: the
    # schedule is today's, then it; no other file names it.
    new = _fault("disk_full", (14, 15), 11)
    schedule = faults.schedule_of([*faults.FAULTS, new])
    assert tuple(f.name for f in schedule) == (*SCHEDULE_TODAY, "disk_full", "disk_full")
    assert faults.table_of([*faults.FAULTS, new])[-1] is new


def test_two_faults_claiming_one_slot_or_leaving_a_gap_are_refused() -> None:
    with pytest.raises(ValueError, match="clashes"):
        faults.schedule_of([*faults.FAULTS, _fault("disk_full", (13,), 11)])
    with pytest.raises(ValueError, match=r"slots must be 0\.\.14"):
        faults.schedule_of([*faults.FAULTS, _fault("disk_full", (15,), 11)])
    with pytest.raises(ValueError, match="table ranks"):
        faults.table_of([*faults.FAULTS, _fault("disk_full", (14,), 3)])
