from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from pos_lambda.batch_layer.cleanup import Partition, doomed

NOW = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
GRACE = timedelta(hours=3)
D1, D2 = date(2026, 3, 1), date(2026, 3, 2)


def part(version: str, day: date = D1, store: int = 101, table: str = "agg_15m_batch") -> Partition:
    return Partition(table, store, day, version)


def test_the_pointed_version_of_each_day_stays_whatever_its_age() -> None:
    parts = [part("v1", D1), part("v1", D2), part("v2", D2)]
    old = NOW - timedelta(days=30)
    assert doomed(parts, {D1: "v1", D2: "v2"}, {"v1": old, "v2": old}, NOW, GRACE) == [
        part("v1", D2)  # v1 still serves D1 but was replaced on D2
    ]


def test_an_orphan_is_spared_while_its_run_may_still_be_writing() -> None:
    parts = [part("running"), part("killed"), part("committed")]
    written = {
        "running": NOW - timedelta(minutes=20),
        "killed": NOW - timedelta(hours=5),
        "committed": NOW - timedelta(hours=5),
    }
    assert doomed(parts, {D1: "committed"}, written, NOW, GRACE) == [part("killed")]


def test_a_version_no_run_mentions_is_an_orphan() -> None:
    assert doomed([part("stray", store=7)], {}, {}, NOW, GRACE) == [part("stray", store=7)]


def test_the_grace_edge_is_exclusive() -> None:
    at_edge = NOW - GRACE
    assert doomed([part("v")], {}, {"v": at_edge}, NOW, GRACE) == []
    assert doomed([part("v")], {}, {"v": at_edge - timedelta(seconds=1)}, NOW, GRACE) == [part("v")]


def test_every_store_and_table_of_a_doomed_version_goes() -> None:
    parts = [part("old", store=s, table=t) for s in (101, 102) for t in ("a", "b")]
    assert doomed(parts, {D1: "new"}, {}, NOW, GRACE) == sorted(parts)


def test_the_current_generation_stays_on_every_day_whatever_the_pointer_names() -> None:
    # A generation's receipts partitions (every day) and a fold's aggregates version.
    parts = [part("g5", D1, table="receipts_batch"), part("g5", D2), part("f9", D2), part("g2")]
    old = NOW - timedelta(days=30)
    written = {"g5": old, "f9": old, "g2": old}
    assert doomed(parts, {D2: "f9"}, written, NOW, GRACE, "g5") == [part("g2")]


def test_a_version_s_grace_counts_from_its_runs_last_progress() -> None:
    """A step-wise rebuild: its first chunk started 5 h ago, its last chunk finished 1 h
    ago. Counted from the start (before issue 62), gc deleted the generation the commit
    still needed; counted from the last progress, it stays."""
    from types import SimpleNamespace

    from pos_lambda.batch_layer.pointer import BatchStore

    five_h, one_h = NOW - timedelta(hours=5), NOW - timedelta(hours=1)
    rows = [
        SimpleNamespace(version="r9-abc-x1", started_at=five_h, finished_at=five_h),
        SimpleNamespace(version="r9-abc-x1", started_at=five_h, finished_at=one_h),
        SimpleNamespace(version="f3-abc-2", started_at=five_h, finished_at=None),
        SimpleNamespace(version=None, started_at=five_h, finished_at=None),
    ]
    store = BatchStore.__new__(BatchStore)  # no cluster: only the session is read
    store.session = SimpleNamespace(execute=lambda *_: rows)
    last: dict[str, datetime] = {}
    for version, at in store.run_versions():
        last[version] = max(at, last.get(version, at))
    assert last == {"r9-abc-x1": one_h, "f3-abc-2": five_h}
    partitions = [part("r9-abc-x1"), part("f3-abc-2")]
    assert doomed(partitions, {}, last, NOW, timedelta(hours=3)) == [part("f3-abc-2")]
