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


def send(settings: Settings, tids: range) -> None:
    """Receipts `tids` of store 101's device 1, receipt n at 10:00 + n minutes."""
    at = [HOUR + timedelta(minutes=n % 60) for n in tids]
    produce_raw(
        settings,
        [message(101, 1, n, t, THREE) for n, t in zip(tids, at, strict=True)],
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
    # The reproduction, steps by hand (no rebuild id): chunks at the built version.
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
