"""Issue 62's races, fast: a rebuild's switch (`rebuild.switch`, the real loop) against the
in-memory pointer, with hourly folds committing around it at every point.

The world is a small model, independent of the code under test: the master dataset is a
ledger of table versions (how many receipts each adds to each day); a fold writes its
days' aggregates as the served ones plus what (after, upto] adds, into the generation it
read (what `fold.py` does with Spark, counted here). After every applied commit:
- the served table version (the folded mark, every day's) never goes backwards;
- every day is served from one generation, the folded one;
- every day serves exactly the ledger's receipts up to the folded table version
  (issue 62, case 1: a switch that rolled back the folds served 20 where 27 were).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from pos_lambda.batch_layer import plan, rebuild
from pos_lambda.batch_layer.fold import Folding
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.batch_layer.pointer import CommitConflict, Folded, PointerState, Served
from tests.support.memory_batch_store import MemoryBatchStore

TABLE = "0f8e2a7c-1111-2222-3333-444455556666"
D1, D2 = date(2026, 3, 2), date(2026, 3, 3)
H0 = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)  # the horizon when the rebuild starts
NOW = datetime(2026, 3, 3, 5, 7, tzinfo=UTC)
SERVED_GENERATION = "g0-0f8e2a7c"
REBUILT = plan.generation_of(0, TABLE, "feedbeef")  # the rebuild's snapshot: version 0
HOURS = [
    Interval(H0, H0 + timedelta(hours=1)),
    Interval(H0 + timedelta(hours=1), H0 + timedelta(hours=2)),
]


@dataclass
class World:
    """The master dataset's ledger and the aggregates each version holds."""

    # table version -> day -> receipts it adds. Version 0: what the rebuild read.
    ledger: dict[int, dict[date, int]] = field(default_factory=lambda: {0: {D1: 20}})
    # aggregates version -> day -> receipts; and the generation each was written into.
    aggregates: dict[str, dict[date, int]] = field(default_factory=dict)
    generation_of: dict[str, str] = field(default_factory=dict)

    @property
    def newest(self) -> int:
        return max(self.ledger)

    def archive(self, adds: dict[date, int]) -> int:
        self.ledger[self.newest + 1] = adds
        return self.newest

    def receipts_upto(self, version: int) -> dict[date, int]:
        out: dict[date, int] = {}
        for v, adds in self.ledger.items():
            if v <= version:
                for day, n in adds.items():
                    out[day] = out.get(day, 0) + n
        return out

    def fold(self, view: PointerState, interval: Interval, upto: int) -> Folding:
        """What fold.fold writes and returns, counted: (view.folded.version, upto] added
        to the view's aggregates, into the view's generation."""
        assert view.folded is not None
        version = plan.fold_version(view.folded, upto)
        new: dict[date, int] = {}
        for v in range(view.folded.version + 1, upto + 1):
            for day, n in self.ledger[v].items():
                new[day] = new.get(day, 0) + n
        written = {}
        for day, n in new.items():
            served = view.days.get(day)
            written[day] = (self.aggregates[served.version].get(day, 0) if served else 0) + n
        self.aggregates[version] = written
        self.generation_of[version] = view.folded.generation
        touched = sorted(new)
        days = plan.fold_days(view, interval, touched, version, new, dict.fromkeys(touched, 1))
        return Folding(version, 0, 0, sum(new.values()), 0, 0, 0, len(touched), days)


def served_before_the_rebuild(world: World) -> MemoryBatchStore:
    """A fold at table version 0 serves D1 (20 receipts) in generation g0."""
    world.aggregates[SERVED_GENERATION] = {D1: 20}
    world.generation_of[SERVED_GENERATION] = SERVED_GENERATION
    world.aggregates[REBUILT] = {D1: 20}  # what the rebuild's chunks wrote at version 0
    world.generation_of[REBUILT] = REBUILT
    store = MemoryBatchStore()
    store.seed(
        PointerState(
            {D1: Served(H0, 0, SERVED_GENERATION, 20, 1)},
            H0,
            1,
            Folded(SERVED_GENERATION, 0, TABLE),
        )
    )
    return store


def hourly_fold(
    store: MemoryBatchStore, world: World, hour: Interval, adds: dict[date, int]
) -> Iterator[str]:
    """One scheduled run: the archiver adds a table version, then the fold reads the
    pointer, folds, and commits; a lost commit reads again (the CLI's until_committed).
    Yields after each pointer operation, so a schedule can interleave it."""
    world.archive(adds)
    while True:
        read = store.state()
        upto = world.newest
        target = plan.fold_target(read, upto, TABLE)
        done = world.fold(read, hour, upto)
        yield "read"
        decided = plan.fold_commit(read, hour, target, done.days)
        try:
            store.commit(
                uuid.uuid1(),
                decided.table_version,
                decided.days,
                decided.horizon,
                NOW,
                read,
                decided.folded,
            )
        except CommitConflict:
            yield "lost"
            continue
        yield "committed"
        return


def two_folds(store: MemoryBatchStore, world: World) -> Iterator[str]:
    yield from hourly_fold(store, world, HOURS[0], {D1: 7})
    yield from hourly_fold(store, world, HOURS[1], {D1: 3, D2: 5})


class Scheduled:
    """The rebuild's handle on the pointer: before each of its operations, `before(op)`
    runs whatever the schedule puts there."""

    def __init__(self, store: MemoryBatchStore, before: Callable[[str], None]) -> None:
        self.store, self.before = store, before

    def state(self) -> PointerState:
        self.before("read")
        return self.store.state()

    def commit(self, *args: Any, **kwargs: Any) -> None:
        self.before("commit")
        self.store.commit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def switch(store: Any, world: World) -> rebuild.Switched:
    return rebuild.switch(
        store,
        uuid.uuid1(),
        Folded(REBUILT, 0, TABLE),
        {D1: (20, 1)},
        None,
        False,
        "/data/master",
        lambda window, view, upto: world.fold(view, window, upto),
        now=lambda: NOW,
    )


def check_every_commit(store: MemoryBatchStore, world: World) -> None:
    before = PointerState(
        {D1: Served(H0, 0, SERVED_GENERATION, 20, 1)}, H0, 1, Folded(SERVED_GENERATION, 0, TABLE)
    )
    for after in store.commits_applied:
        assert before.folded is not None and after.folded is not None
        assert after.folded.version >= before.folded.version, "served table version went back"
        for day, was in before.days.items():
            assert after.days[day].delta_version >= was.delta_version
            assert after.days[day].covered_until >= was.covered_until
        expected = world.receipts_upto(after.folded.version)
        for day, served in after.days.items():
            assert world.generation_of[served.version] == after.folded.generation, day
            assert world.aggregates[served.version].get(day, 0) == expected.get(day, 0), day
            assert served.receipt_count == expected.get(day, 0), day
        before = after


# --- every interleaving of: rebuild reads, fold 1 commits, fold 2 commits, rebuild commits


def atomic_schedule(
    order: tuple[str, ...], store: MemoryBatchStore, world: World
) -> Callable[[str], None]:
    """Folds as one step each, placed before the rebuild's first read ("R") or its first
    commit ("C") as `order` says; after that the rebuild's retries run alone."""
    folds = iter([HOURS[0], HOURS[1]])
    adds = iter([{D1: 7}, {D1: 3, D2: 5}])
    seen: list[str] = []

    def run_one() -> None:
        for _ in hourly_fold(store, world, next(folds), next(adds)):
            pass

    def before(op: str) -> None:
        marker = "R" if op == "read" else "C"
        if marker in seen:
            return
        for event in order[len(seen) :]:
            seen.append(event)
            if event == marker:
                return
            run_one()

    before.rest = lambda: [run_one() for e in order[len(seen) :] if e.startswith("F")]  # type: ignore[attr-defined]
    return before


ORDERS = [
    o
    for o in itertools.permutations(("R", "F1", "F2", "C"))
    if o.index("R") < o.index("C") and o.index("F1") < o.index("F2")
]


@pytest.mark.parametrize(
    ("order", "caught_up"),
    [
        (("R", "F1", "F2", "C"), 15),  # lost its compare-and-set, then caught up (0, 2]
        (("R", "F1", "C", "F2"), 7),  # lost, caught up (0, 1]; fold 2 folds into it
        (("R", "C", "F1", "F2"), 0),  # switched at 0; both folds into the generation
        (("F1", "R", "F2", "C"), 15),  # caught up (0, 1], lost, caught up (1, 2]
        (("F1", "R", "C", "F2"), 7),
        (("F1", "F2", "R", "C"), 15),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else f"caught_up_{value}",
)
def test_a_rebuild_interleaved_with_two_folds(order: tuple[str, ...], caught_up: int) -> None:
    assert len(ORDERS) == 6 and order in ORDERS
    world = World()
    store = served_before_the_rebuild(world)
    before = atomic_schedule(order, store, world)
    switched = switch(Scheduled(store, before), world)
    before.rest()  # type: ignore[attr-defined]
    assert switched.caught_up_receipts == caught_up
    check_every_commit(store, world)
    end = store.state()
    assert end.folded == Folded(REBUILT, 2, TABLE)  # the highest committed table version
    assert {d: s.receipt_count for d, s in end.days.items()} == {D1: 30, D2: 5}
    assert {d: s.delta_version for d, s in end.days.items()} == {D1: 2, D2: 2}


# --- every interleaving, folds split into read and commit -------------------------------


class Chooser:
    """Replays a prefix of choices, then takes 0; records each point's options."""

    def __init__(self, prefix: list[int]) -> None:
        self.prefix, self.taken, self.options = prefix, [], []  # type: ignore[var-annotated]

    def choose(self, options: int) -> int:
        at = len(self.taken)
        pick = self.prefix[at] if at < len(self.prefix) else 0
        self.taken.append(pick)
        self.options.append(options)
        return pick


def explore(scenario: Callable[[Chooser], None]) -> int:
    """Run `scenario` once per path of its choice tree (depth first); the path count."""
    paths, stack = 0, [[]]  # type: ignore[var-annotated]
    while stack:
        prefix = stack.pop()
        chooser = Chooser(prefix)
        scenario(chooser)
        paths += 1
        for depth in range(len(prefix), len(chooser.taken)):
            stack.extend([*chooser.taken[:depth], alt] for alt in range(1, chooser.options[depth]))
    return paths


def test_a_rebuild_interleaved_with_two_folds_at_every_point() -> None:
    """Before each of the rebuild's pointer operations (its reads and its compare-and-set
    commits, retries included), any number of the folds' steps (each fold's read, its
    commit or lost commit, its retries) may run; the rest run after the switch."""
    caught_up: set[int] = set()

    def scenario(chooser: Chooser) -> None:
        world = World()
        store = served_before_the_rebuild(world)
        folds = two_folds(store, world)
        finished = False

        def before(op: str) -> None:
            nonlocal finished
            while not finished and chooser.choose(2) == 1:  # one more fold step first?
                finished = next(folds, None) is None

        switched = switch(Scheduled(store, before), world)
        for _ in folds:
            pass
        check_every_commit(store, world)
        end = store.state()
        assert end.folded == Folded(REBUILT, 2, TABLE)
        assert {d: s.receipt_count for d, s in end.days.items()} == {D1: 30, D2: 5}
        caught_up.add(switched.caught_up_receipts)

    paths = explore(scenario)
    # Every interleaving ran: the fold steps (4 without a lost commit) placed before any of
    # the rebuild's 2 to 6 operations, and each lost commit's retry with them.
    assert paths > 6
    assert caught_up == {0, 7, 15}


def test_a_rebuild_that_keeps_losing_gives_up_and_never_serves_its_older_version() -> None:
    world = World()
    store = served_before_the_rebuild(world)
    hours = iter(Interval(H0 + timedelta(hours=n), H0 + timedelta(hours=n + 1)) for n in range(9))

    def a_fold_before_every_commit(op: str) -> None:
        if op == "commit":
            for _ in hourly_fold(store, world, next(hours), {D1: 1}):
                pass

    with pytest.raises(CommitConflict):
        switch(Scheduled(store, a_fold_before_every_commit), world)
    assert store.conflicts == rebuild.SWITCH_RETRIES + 1
    check_every_commit(store, world)
    end = store.state()
    assert end.folded == Folded(SERVED_GENERATION, 4, TABLE)  # the folds', never the rebuild's
    assert end.days[D1].receipt_count == 24
