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
