"""The full recompute and its pointer beside the hourly folds (issue 62), through the
CLIs, on real Spark, Delta and Cassandra.

One store (101), one hour (2 March 10:00-11:00 UTC), receipts worth 3.00 each: the
served answer is compared with literals (the receipts this test sent), never with what
the code under test computes.

- A rebuild whose chunks read table version V, committed after an hourly fold counted
  version V2 > V: the switch folds (V, V2] into the rebuild's generation first. Before
  the fix the commit served V's 20 receipts as final and lost the 7 folded meanwhile.
- A second rebuild at the same table version writes a generation of its own; steps run
  by hand that name the served generation are refused.
- `rebuild --end` in the future is refused, as `run --end` is.
- A replaced master table stops the hourly run with a message; `--new-table` takes it
  over and serves every day from it.
- `pos-batch gc` between a rebuild's chunks and its commit spares the generation while
  its last progress is within the grace; past it, the commit refuses the holes.
- Conflicts are versioned: a rebuild's conflicts show only with its commit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.adapters import master_dataset
from pos_lambda.batch_layer import job, rebuild
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import VENV_BIN, device_key, env_for, ms, produce_raw
from tests.integration.speed_helpers import receipt_json as message

pytestmark = pytest.mark.integration

HOUR = datetime(2026, 3, 2, 10, tzinfo=UTC)
THE_HOUR = Interval(HOUR, HOUR + timedelta(hours=1))
THREE = [{"title": "Basket", "price": "3.00", "amount": 1}]


def send(settings: Settings, tids: range, items: list[dict[str, Any]] = THREE) -> None:
    """Receipts `tids` of store 101's device 1, receipt n at 10:00 + n minutes."""
    at = [HOUR + timedelta(minutes=n % 60) for n in tids]
    produce_raw(
        settings,
        [message(101, 1, n, t, items) for n, t in zip(tids, at, strict=True)],
        [ms(t) for t in at],
        [device_key(101, 1)] * len(tids),
    )


def archive(spark: Any, settings: Settings) -> int:
    """The archiver over everything in the topic; the master dataset's newest version."""
    from pos_lambda.speed_layer import archiver_job

    q = archiver_job.start(spark, settings, available_now=True)
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    return int(master_dataset.latest_version(spark, settings))


def cli(settings: Settings, command: str, *args: str, ok: bool = True) -> Any:
    done = subprocess.run(
        [str(VENV_BIN / command), *args],
        env=env_for(settings), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def fold(spark: Any, settings: Settings, new_table: bool = False) -> job.RunResult:
    """The hourly run over the hour, in this process's Spark session (as `pos-batch run`)."""
    return job.run(spark, settings, THE_HOUR, new_table=new_table)


def rebuild_all(spark: Any, settings: Settings, chunks: int = 2) -> dict[str, Any]:
    """`pos-batch rebuild --chunks N` in this process: every chunk, then the commit."""
    version = int(master_dataset.latest_version(spark, settings))
    rebuild_id = rebuild.new_rebuild_id()
    for chunk in range(chunks):
        rebuild.run_chunk(spark, settings, version, chunk, chunks, rebuild_id)
    return rebuild.commit(spark, settings, version, chunks, rebuild_id=rebuild_id)


def served(settings: Settings) -> tuple[int, Decimal, set[bool]]:
    """Receipts and revenue `pos-serve windows` answers for the hour, and its finality."""
    done = cli(settings, "pos-serve", "windows", "--store", "101", "--start",
               "2026-03-02T10:00Z", "--end", "2026-03-02T11:00Z", "--format", "json")  # fmt: skip
    rows = json.loads(done.stdout)["windows"]
    return (
        sum(r["receipt_count"] for r in rows),
        sum((Decimal(r["revenue"]) for r in rows), Decimal("0")),
        {r["final"] for r in rows},
    )


@pytest.fixture
def store_101(isolated: tuple[Settings, Any]) -> Settings:
    settings, _ = isolated
    cli(settings, "pos-stores", "add", "101", "--name", "Rebuilt", "--zone", "UTC",
        "--hours", "daily=00:00-24:00")  # fmt: skip
    return settings


def test_a_rebuild_switch_folds_what_committed_meanwhile(spark: Any, store_101: Settings) -> None:
    s = store_101
    send(s, range(1, 21))
    v0 = archive(spark, s)
    built = fold(spark, s)
    assert (built.mode, built.receipts) == ("build", 20)
    # The issue's reproduction, steps by hand (no rebuild id): chunks at the built version.
    for chunk in (0, 1):
        rebuild.run_chunk(spark, s, built.delta_version, chunk, 2)
    send(s, range(21, 28))  # 7 late receipts of the same hour, folded while it runs
    v1 = archive(spark, s)
    assert v1 > v0
    folded = fold(spark, s)
    assert (folded.mode, folded.receipts) == ("fold", 7)
    switched = rebuild.commit(spark, s, built.delta_version, 2)
    assert (switched["caught_up_receipts"], switched["delta_version"]) == (7, v1)
    assert served(s) == (27, Decimal("81.00"), {True})
    # The next hourly fold continues from the rebuilt generation.
    send(s, range(28, 29))
    archive(spark, s)
    assert fold(spark, s).receipts == 1
    assert served(s) == (28, Decimal("84.00"), {True})


def test_a_second_rebuild_at_a_served_version_writes_its_own_generation(
    spark: Any, store_101: Settings
) -> None:
    s = store_101
    send(s, range(1, 11))
    archive(spark, s)
    fold(spark, s)
    first, second = rebuild_all(spark, s), rebuild_all(spark, s)
    assert first["delta_version"] == second["delta_version"]
    assert first["generation"] != second["generation"]
    assert served(s) == (10, Decimal("30.00"), {True})
    # By hand, without a rebuild id: the table version's own generation, once.
    version = second["delta_version"]
    rebuild.run_chunk(spark, s, version, 0, 1)
    rebuild.commit(spark, s, version, 1)
    assert served(s) == (10, Decimal("30.00"), {True})
    # Again: it is served now, so refused before a row is written (the CLI exits 1).
    again = cli(s, "pos-batch", "rebuild", "--chunks", "1", "--chunk", "0",
                "--delta-version", str(version), ok=False)  # fmt: skip
    assert again.returncode == 1
    assert "has been committed already: a rebuild at a table version already served" in (
        again.stderr
    )
    assert served(s) == (10, Decimal("30.00"), {True})


def test_a_rebuild_end_in_the_future_is_refused(store_101: Settings) -> None:
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:00Z")
    done = cli(store_101, "pos-batch", "rebuild", "--end", tomorrow, ok=False)
    assert done.returncode == 2
    assert f"--end {tomorrow[:13]}" in done.stderr and "is in the future" in done.stderr


def test_a_replaced_master_table_is_taken_over_on_purpose_only(
    spark: Any, store_101: Settings
) -> None:
    s = store_101
    send(s, range(1, 6))
    archive(spark, s)
    fold(spark, s)
    # The table is recreated (a restore elsewhere, say): a new table id, small versions.
    shutil.rmtree(s.master_dataset_dir)
    shutil.rmtree(s.checkpoint_dir / "archiver")
    send(s, range(6, 8))
    archive(spark, s)
    with pytest.raises(job.TableReplaced, match="is another Delta table") as refused:
        fold(spark, s)
    assert "pos-batch run --new-table" in str(refused.value)
    assert served(s) == (5, Decimal("15.00"), {True})
    assert fold(spark, s, new_table=True).mode == "build"
    assert served(s) == (7, Decimal("21.00"), {True})
    assert fold(spark, s).mode == "fold"  # and the hourly runs fold on from it


def backdate(session: Any, generation: str, started: timedelta, finished: timedelta) -> int:
    """Make the runs that wrote `generation` look as if they started and finished that
    long ago (a step-wise rebuild whose chunks ran hours before its commit)."""
    now = datetime.now(UTC)
    runs = [r.run_id for r in session.execute("SELECT run_id, version FROM batch_runs "
            "WHERE view_name = 'batch'") if r.version == generation]  # fmt: skip
    for run_id in runs:
        session.execute(
            "UPDATE batch_runs SET started_at = %s, finished_at = %s "
            "WHERE view_name = 'batch' AND run_id = %s",
            (now - started, now - finished, run_id),
        )
    return len(runs)


def chunks_of_a_rebuild(spark: Any, settings: Settings, chunks: int = 2) -> tuple[str, int, str]:
    """A rebuild's chunks, not its commit: (rebuild id, table version, generation)."""
    version = int(master_dataset.latest_version(spark, settings))
    rebuild_id = rebuild.new_rebuild_id()
    done = [
        rebuild.run_chunk(spark, settings, version, n, chunks, rebuild_id) for n in range(chunks)
    ]
    return rebuild_id, version, done[0].generation


def test_gc_spares_a_rebuild_from_its_last_progress_and_its_commit_refuses_holes(
    spark: Any, isolated: tuple[Settings, Any], store_101: Settings
) -> None:
    s, session = store_101, isolated[1]
    send(s, range(1, 11))
    archive(spark, s)
    fold(spark, s)
    # Chunks that started 5 h ago and finished 2 h ago, the commit queued since: the
    # grace (3 h) counts from the last progress, so gc keeps the generation.
    rebuild_id, version, generation = chunks_of_a_rebuild(spark, s)
    assert backdate(session, generation, timedelta(hours=5), timedelta(hours=2)) == 2
    cli(s, "pos-batch", "gc")
    assert rebuild.commit(spark, s, version, 2, rebuild_id=rebuild_id)["generation"] == generation
    assert served(s) == (10, Decimal("30.00"), {True})
    # Another rebuild whose chunks finished 4 h ago: gc deletes its rows, and its commit
    # refuses to serve a generation with holes (the served answer stays as it was).
    rebuild_id, version, generation = chunks_of_a_rebuild(spark, s)
    assert backdate(session, generation, timedelta(hours=6), timedelta(hours=4)) == 2
    gc = json.loads(cli(s, "pos-batch", "gc").stdout)
    assert gc["versions_deleted"] >= 1
    with pytest.raises(rebuild.RebuildError, match="the chunks wrote 10 receipts but 0 are there"):
        rebuild.commit(spark, s, version, 2, rebuild_id=rebuild_id)
    assert served(s) == (10, Decimal("30.00"), {True})


def issues(settings: Settings) -> list[dict[str, Any]]:
    """The conflicts `pos-serve issues` answers for store 101 on 2 March."""
    done = cli(settings, "pos-serve", "issues", "--store", "101", "--day", "2026-03-02",
               "--format", "json")  # fmt: skip
    conflicts: list[dict[str, Any]] = json.loads(done.stdout)["conflicts"]
    return conflicts


def test_a_rebuilds_conflicts_show_with_its_commit_only(spark: Any, store_101: Settings) -> None:
    s = store_101
    send(s, range(1, 6))
    archive(spark, s)
    fold(spark, s)
    # Receipt 3 again with another price: a conflicting copy, archived after the fold.
    send(s, range(3, 4), [{"title": "Basket", "price": "4.00", "amount": 1}])
    archive(spark, s)
    rebuild_id, version, _ = chunks_of_a_rebuild(spark, s)
    # The chunks wrote the conflict into the generation; nothing serves it yet.
    assert issues(s) == []
    rebuild.commit(spark, s, version, 2, rebuild_id=rebuild_id)
    [conflict] = issues(s)
    assert (conflict["transaction_id"], conflict["revenue"], conflict["winner_revenue"]) == (
        3, "4.00", "3.00",
    )  # fmt: skip
    assert served(s) == (5, Decimal("15.00"), {True})
