"""The in-memory pointer (tests/support/memory_batch_store.py) keeps the port's contract
as the Cassandra adapter does: the conditional commit, all days or none, the runs'
bookkeeping; and what the rebuild's shell asks of it through the port."""

from __future__ import annotations

import inspect
import uuid
from datetime import UTC, date, datetime

import pytest

from pos_lambda.batch_layer import rebuild
from pos_lambda.batch_layer.pointer import (
    BatchPointer,
    BatchStore,
    CommitConflict,
    DayCommit,
    Folded,
    PointerState,
    Served,
)
from tests.support.memory_batch_store import MemoryBatchStore

D1, D2 = date(2026, 3, 2), date(2026, 3, 3)
T1, T2 = datetime(2026, 3, 3, tzinfo=UTC), datetime(2026, 3, 3, 1, tzinfo=UTC)
TABLE = "0f8e2a7c-1111-2222-3333-444455556666"


def _port_methods() -> list[str]:
    return [n for n, v in vars(BatchPointer).items() if inspect.isfunction(v) and n[0] != "_"]


@pytest.mark.parametrize("name", _port_methods())
def test_the_adapter_and_the_fake_have_the_port_s_methods(name: str) -> None:
    port = inspect.signature(getattr(BatchPointer, name))
    for impl in (BatchStore, MemoryBatchStore):
        assert list(inspect.signature(getattr(impl, name)).parameters) == list(port.parameters)


def test_a_commit_applies_when_the_counter_is_as_read_and_bumps_it() -> None:
    store = MemoryBatchStore()
    first = store.state()
    assert first == PointerState({}, None, None)
    days = [DayCommit(D1, T1, 20, 3, "g0"), DayCommit(D2, T2, 5, 1, "g0")]
    store.commit(uuid.uuid1(), 4, days, T2, T2, first, Folded("g0", 4, TABLE))
    assert store.state() == PointerState(
        {D1: Served(T1, 4, "g0", 20, 3), D2: Served(T2, 4, "g0", 5, 1)},
        T2,
        1,
        Folded("g0", 4, TABLE),
    )


def test_a_commit_after_another_one_is_refused_whole() -> None:
    store = MemoryBatchStore()
    read = store.state()
    store.commit(uuid.uuid1(), 1, [DayCommit(D1, T1, 1, 1, "a")], T1, T1, read)
    after_winner = store.state()
    with pytest.raises(CommitConflict, match="commit counter None when read, 1 now"):
        store.commit(
            uuid.uuid1(),
            2,
            [DayCommit(D1, T2, 9, 9, "b"), DayCommit(D2, T2, 9, 9, "b")],
            T2,
            T2,
            read,
            Folded("b", 2, TABLE),
        )
    assert store.state() == after_winner  # no day, no horizon, no mark of the loser
    assert store.conflicts == 1


def test_days_a_commit_does_not_name_keep_their_rows_and_no_mark_keeps_the_mark() -> None:
    store = MemoryBatchStore()
    store.commit(
        uuid.uuid1(),
        1,
        [DayCommit(D1, T1, 1, 1, "a")],
        T1,
        T1,
        store.state(),
        Folded("a", 1, TABLE),
    )
    store.commit(uuid.uuid1(), 2, [DayCommit(D2, T2, 2, 2, "p")], T2, T2, store.state())
    assert store.state() == PointerState(
        {D1: Served(T1, 1, "a", 1, 1), D2: Served(T2, 2, "p", 2, 2)}, T2, 2, Folded("a", 1, TABLE)
    )


def test_run_bookkeeping_reads_back_as_the_adapter_s_queries_do() -> None:
    store = MemoryBatchStore()
    done, running = uuid.uuid1(), uuid.uuid1()
    store.record_run(done, {"status": "running", "version": "r0-x", "started_at": T1})
    store.record_run(done, {"status": "committed", "finished_at": T2})
    store.record_run(running, {"status": "running", "version": "r1-x", "started_at": T1})
    with pytest.raises(ValueError, match="not columns"):
        store.record_run(done, {"no_such_column": 1})
    assert store.committed_versions() == {"r0-x"}
    assert sorted(store.run_versions()) == [("r0-x", T2), ("r1-x", T1)]
    run = store.run(done)
    assert run is not None and (run.status, run.version, run.finished_at) == (
        "committed",
        "r0-x",
        T2,
    )
    assert store.run(uuid.uuid1()) is None


def test_a_second_rebuild_at_a_served_version_gets_its_own_generation() -> None:
    """Issue 62, case 2: a rebuild at table version 0 was committed and is served; a
    second one at the same table version may not write into it, but into its own."""
    store = MemoryBatchStore()
    served = rebuild.generation_of(0, TABLE, "feedbeef")
    store.commit(
        uuid.uuid1(),
        0,
        [DayCommit(D1, T1, 20, 1, served)],
        T1,
        T1,
        store.state(),
        Folded(served, 0, TABLE),
    )
    with pytest.raises(rebuild.RebuildError, match="committed already"):
        rebuild.ensure_unserved(store, served)
    rebuild.ensure_unserved(store, rebuild.generation_of(0, TABLE, "0ddba11"))
    # A generation once committed and since replaced is refused too (its rows may be gone).
    run = uuid.uuid1()
    store.record_run(run, {"status": "committed", "version": "r0-0f8e2a7c", "started_at": T1})
    with pytest.raises(rebuild.RebuildError, match="committed already"):
        rebuild.ensure_unserved(store, "r0-0f8e2a7c")
