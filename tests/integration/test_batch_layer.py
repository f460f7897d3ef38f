"""The batch layer against real Kafka, Spark (Delta master dataset) and Cassandra.

Expected values come from the producer's ledger (computed with Python Decimal by the
simulator) or from literals, never from the code under test.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.batch_layer import job
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig
from pos_lambda.producer.simulation import simulate as run_simulation
from pos_lambda.schemas import cql as tables
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import (
    VENV_BIN,
    device_key,
    env_for,
    expected_aggregates,
    ms,
    produce_raw,
    receipt_json,
    run_available_now,
    send,
    speed_aggregates,
)

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 2, 8, tzinfo=UTC)
BOUND = timedelta(hours=48)  # the speed layer's default lateness bound
ALL_DAYS = Interval(datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 14, tzinfo=UTC))


def _simulate(ledger: Path, count: int, seed: int, faults: FaultConfig) -> list[Any]:
    result = run_simulation(
        SimulationConfig(
            count=count, seed=seed, start=START, stores=5, mean_gap_s=90.0, faults=faults
        )
    )
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    return result.messages


def _archive(spark: Any, settings: Settings) -> None:
    """The archiver over everything in the topic now: Kafka -> Delta master dataset."""
    from pos_lambda.speed_layer import archiver_job

    q = archiver_job.start(spark, settings, available_now=True)
    q.awaitTermination()
    assert q.exception() is None, q.exception()


def _pointers(cql: Any) -> dict[str, str]:
    rows = cql.execute(f"SELECT day, version FROM {tables.BATCH_POINTER_TABLE}").all()
    return {str(r.day): r.version for r in rows if r.day is not None}


def _served_windows(cql: Any) -> list[Any]:
    """The agg_15m_batch rows a reader takes: of the version the pointer names for their
    day, and of a window that ends by the day's covered_until and the horizon (runs
    write the windows of every record they read; readers cut where the batch is final)."""
    rows = cql.execute(
        f"SELECT day, version, covered_until, horizon FROM {tables.BATCH_POINTER_TABLE}"
    ).all()
    served = {str(r.day): (r.version, r.covered_until) for r in rows if r.day is not None}
    horizon = rows[0].horizon if rows else None
    out = []
    for r in cql.execute(f"SELECT * FROM {tables.AGG_BATCH_TABLE}"):
        version, covered = served.get(str(r.day), (None, None))
        end = r.window_start + timedelta(minutes=15)
        if version == r.version and end <= covered and end <= horizon:
            out.append(r)
    return out


def served_aggregates(cql: Any) -> dict[tuple[int, datetime], tuple[int, int, Decimal, int]]:
    """The batch aggregates a reader sees (`_served_windows`): count, quantity, revenue,
    late count."""
    return {window: row[:4] for window, row in _served_rows(cql).items()}


def served_receipts(cql: Any) -> dict[tuple[int, int, int], Any]:
    """The batch receipts a reader sees: of a day's generation partition, the rows whose
    table version (master_version) its committed delta_version counts."""
    rows = cql.execute(
        f"SELECT day, generation, delta_version, covered_until, horizon "
        f"FROM {tables.BATCH_POINTER_TABLE}"
    ).all()
    days = {str(r.day): (r.delta_version, r.covered_until) for r in rows if r.day is not None}
    generation, horizon = (rows[0].generation, rows[0].horizon) if rows else (None, None)
    out: dict[tuple[int, int, int], Any] = {}
    for r in cql.execute(f"SELECT * FROM {tables.RECEIPTS_BATCH_TABLE}"):
        counted, covered = days.get(str(r.day), (None, None))
        if (
            r.version == generation
            and counted is not None
            and r.master_version <= counted
            and r.happened_at < min(covered, horizon)
        ):
            key = (r.operation_id, r.vendor_fiscal_module, r.transaction_id)
            assert key not in out, f"{key} served twice"
            out[key] = r
    return out


def expected_gaps(
    receipts: list[tuple[int, int, int, datetime]],
) -> dict[tuple[int, str, int], tuple[int, int, int, list[str]]]:
    """(store, UTC day, device) -> first, last, count and the missing ranges of the
    numbers in `receipts` (store, device, number, happened_at), computed here: the
    simulator numbers each device's receipts consecutively and never restarts one, so a
    device's day is one run and every hole between two of its numbers is missing."""
    numbers: dict[tuple[int, str, int], set[int]] = {}
    for store, device, number, happened_at in receipts:
        day = str(happened_at.astimezone(UTC).date())
        numbers.setdefault((store, day, device), set()).add(number)
    out = {}
    for key, found in numbers.items():
        ns = sorted(found)
        missing = [
            str(a + 1) if b - a == 2 else f"{a + 1}-{b - 1}"
            for a, b in itertools.pairwise(ns)
            if b - a > 1
        ]
        out[key] = (ns[0], ns[-1], len(ns), missing)
    return out


def served_gaps(cql: Any) -> dict[tuple[int, str, int], tuple[int, int, int, list[str]]]:
    """The device_gaps_batch rows a reader takes: of the version the pointer names for
    their day."""
    served = _pointers(cql)
    return {
        (r.operation_id, str(r.day), r.vendor_fiscal_module): (
            r.first_number,
            r.last_number,
            r.receipt_count,
            list(r.missing or []),
        )
        for r in cql.execute(f"SELECT * FROM {tables.GAPS_BATCH_TABLE}")
        if served.get(str(r.day)) == r.version
    }


def _sent_receipts(messages: list[Any], ledger: Path) -> list[tuple[int, int, int, datetime]]:
    """The ledger's receipts that `messages` carry a copy of (by the key their bytes
    state), with the ledger's instant."""
    truth = ledger_files.load_receipts(ledger)
    keys = set()
    for m in messages:
        if m.kind.startswith("malformed"):
            continue
        body = json.loads(m.value)
        keys.add((body["operation_id"], body["vendor_fiscal_module"], body["transaction_id"]))
    return [(*k, datetime.fromisoformat(truth[k]["happened_at"])) for k in keys if k in truth]


def _cross_day_conflict(settings: Settings) -> None:
    """One receipt of store 9001 sent twice with different content, the copies on two
    days: the first copy (23:59:50 on 2 March, 2 x 1.90) wins wherever the other says."""
    first = datetime(2026, 3, 2, 23, 59, 50, tzinfo=UTC)
    other = datetime(2026, 3, 3, 0, 0, 10, tzinfo=UTC)
    produce_raw(
        settings,
        [
            receipt_json(9001, 1, 1, first),
            receipt_json(9001, 1, 1, other, [{"title": "Tea", "price": "2.50", "amount": 1}]),
        ],
        timestamps=[ms(first + timedelta(seconds=5)), ms(other + timedelta(seconds=5))],
        keys=[device_key(9001, 1), device_key(9001, 1)],
    )


def test_batch_views_equal_the_ledger_rerun_identical_killed_run_invisible(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = isolated
    ledger = tmp_path / "ledger"
    messages = _simulate(
        ledger,
        count=1500,
        seed=11,
        faults=FaultConfig(
            resend_rate=0.05,
            malformed_rate=0.02,
            late_rate=0.08,
            late_max_delay_s=4 * 86400.0,  # some receipts days beyond the speed bound
        ),
    )
    send(settings, messages)
    _cross_day_conflict(settings)
    _archive(spark, settings)

    expected_receipts = ledger_files.load_receipts(ledger)
    summary = ledger_files.load_summary(ledger)
    beyond = [
        r
        for r in expected_receipts.values()
        if datetime.fromisoformat(r["first_sent_at"]) - datetime.fromisoformat(r["happened_at"])
        > BOUND
    ]
    assert beyond, "the simulation must hold receipts beyond the speed bound"

    # 1. The first run builds every day from every record (a new generation); the
    # conflicting copy (dated 3 March) must not win: the first copy, 2 March, does.
    result = job.run(spark, settings, ALL_DAYS)
    assert result.mode == "build"
    want = expected_aggregates(ledger)
    want[(9001, datetime(2026, 3, 2, 23, 45))] = (1, 2, Decimal("3.80"), 0)
    assert served_aggregates(cql) == want
    receipts = served_receipts(cql)
    assert set(receipts) == {*expected_receipts, (9001, 1, 1)}
    assert (str(receipts[(9001, 1, 1)].day), Decimal(receipts[(9001, 1, 1)].revenue)) == (
        "2026-03-02",
        Decimal("3.80"),
    )
    for key, r in expected_receipts.items():
        row = receipts[key]
        assert (row.item_quantity, Decimal(row.revenue), row.late) == (
            int(r["item_quantity"]),
            Decimal(r["revenue"]),
            r["late"],
        ), key
    resends = sum(int(r["copies"]) - 1 for r in expected_receipts.values())
    assert (
        result.receipts,
        result.duplicates_removed,
        result.conflicts,
        result.beyond_speed_bound,
        result.invalid_rows,
        result.input_rows,
        result.index_rows_written,
    ) == (
        len(expected_receipts) + 1,
        resends + 1,
        1,
        len(beyond),
        summary["faults"]["malformed"],
        summary["messages"] + 2,
        len(expected_receipts) + 1,
    )
    # The batch's conflicts are its own, under the version it commits (issue 62 case 5).
    conflict = cql.execute(f"SELECT * FROM {tables.CONFLICTS_BATCH_TABLE}").one()
    assert (conflict.operation_id, str(conflict.winner_day), str(conflict.day)) == (
        9001,
        "2026-03-02",
        "2026-03-03",
    )
    assert (conflict.version, conflict.master_version) == (result.version, result.delta_version)
    assert cql.execute(f"SELECT * FROM {tables.CONFLICTS_TABLE}").all() == []
    run_row = cql.execute(
        f"SELECT * FROM {tables.BATCH_RUNS_TABLE} WHERE view_name = 'batch' AND run_id = %s",
        [result.run_id],
    ).one()
    assert (run_row.status, run_row.delta_version, run_row.input_rows) == (
        "committed",
        result.delta_version,
        result.input_rows,
    )

    # 2. The same interval again, nothing archived since: a fold of nothing, no row
    # written, the same versions served.
    stored_before = cql.execute(f"SELECT * FROM {tables.AGG_BATCH_TABLE}").all()
    pointers_before = _pointers(cql)
    again = job.run(spark, settings, ALL_DAYS)
    assert (again.mode, again.input_rows, again.view_rows_written) == ("fold", 0, 0)
    assert _pointers(cql) == pointers_before
    assert sorted(cql.execute(f"SELECT * FROM {tables.AGG_BATCH_TABLE}").all()) == sorted(
        stored_before
    )
    assert served_aggregates(cql) == want

    # 3. New data arrives; a run killed after writing its receipts changes nothing
    # served: its receipt row is there, but its table version is not committed.
    late_day = datetime(2026, 3, 4, 10, 0, 1, tzinfo=UTC)
    produce_raw(
        settings,
        [receipt_json(9002, 1, 1, late_day)],
        timestamps=[ms(late_day)],
        keys=[device_key(9002, 1)],
    )
    _archive(spark, settings)
    pointers_before = _pointers(cql)
    served_before = set(served_receipts(cql))
    env = env_for(settings) | {"POS_BATCH_CRASH_POINT": "after_receipts"}
    killed = subprocess.run(
        [str(VENV_BIN / "pos-batch"), "run", "--start", "2026-03-01T00:00Z",
         "--end", "2026-03-14T00:00Z", "--lookback-hours", "0"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    store_9002 = f"SELECT * FROM {tables.RECEIPTS_BATCH_TABLE} WHERE operation_id = 9002"
    assert len(cql.execute(store_9002 + " ALLOW FILTERING").all()) == 1  # on disk, not served
    assert _pointers(cql) == pointers_before
    assert served_aggregates(cql) == want
    assert set(served_receipts(cql)) == served_before
    statuses = [r.status for r in cql.execute(f"SELECT status FROM {tables.BATCH_RUNS_TABLE}")]
    assert statuses.count("running") == 1  # the killed run: never committed

    # 4. The next run folds the new receipt (once: the killed run's row is rewritten)
    # into its day only; every other day keeps its version.
    env.pop("POS_BATCH_CRASH_POINT")
    done = subprocess.run(
        [str(VENV_BIN / "pos-batch"), "run", "--start", "2026-03-01T00:00Z",
         "--end", "2026-03-14T00:00Z", "--lookback-hours", "0"],
        env=env, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    summary_line = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary_line["delta_version"] > result.delta_version
    assert (summary_line["mode"], summary_line["input_rows"], summary_line["receipts"]) == (
        "fold",
        1,
        1,
    )
    want[(9002, datetime(2026, 3, 4, 10, 0))] = (1, 2, Decimal("3.80"), 0)
    assert served_aggregates(cql) == want
    assert set(served_receipts(cql)) == {*served_before, (9002, 1, 1)}
    changed = {d for d, v in _pointers(cql).items() if v != pointers_before[d]}
    assert changed == {"2026-03-04"}

    # 5. gc: nothing to drop (the build had no rows on 4 March, and its generation holds
    # every day's receipts and the other days' aggregates); what readers see stays.
    def versions(table: str) -> set[tuple[Any, str]]:
        rows = cql.execute(f"SELECT DISTINCT operation_id, day, version FROM {table}")
        return {(r.day, r.version) for r in rows}

    gc = subprocess.run(
        [str(VENV_BIN / "pos-batch"), "gc", "--grace-hours", "0"],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert json.loads(gc.stdout.strip().splitlines()[-1])["versions_deleted"] == 0
    assert {v for _, v in versions(tables.RECEIPTS_BATCH_TABLE)} == {result.version}
    assert served_aggregates(cql) == want
    assert set(served_receipts(cql)) == {*served_before, (9002, 1, 1)}


def test_batch_and_speed_give_identical_aggregates_on_duplicate_free_input(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    """The drift test: one aggregation function, two layers, the same rows."""
    settings, cql = isolated
    ledger = tmp_path / "ledger"
    send(settings, _simulate(ledger, count=600, seed=5, faults=FaultConfig()))
    run_available_now(spark, settings)
    job.run(spark, settings, ALL_DAYS)
    speed = speed_aggregates(cql)
    assert speed == expected_aggregates(ledger)
    assert served_aggregates(cql) == speed


def test_a_master_dataset_with_an_old_archivers_verdicts_is_judged_again(
    spark: Any, isolated: tuple[Settings, Any]
) -> None:
    """An older archiver stored a verdict and the parsed receipt with each record. The
    archiver now appends records unjudged to that very table, and the batch job judges
    every record again: a receipt an old validator wrongly refused counts now."""
    from pyspark.sql import functions as F

    from pos_lambda.views import records

    settings, cql = isolated
    at = datetime(2026, 3, 2, 9, tzinfo=UTC)
    old = spark.createDataFrame(
        [
            (None, receipt_json(1, 1, 1, at), "old", 0, 0, at),
            (None, receipt_json(1, 1, 3, at + timedelta(minutes=1)), "old", 0, 1, at),
        ],
        "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp",
    )
    checked = records.check(old)
    wrongly_refused = F.col("kafka_offset") == 1  # as an old validator's bug would have
    (
        checked.select(
            *records.KAFKA_COLUMNS.values(),
            F.lit(at).alias("ingested_at"),
            (records.is_valid() & ~wrongly_refused).alias("valid"),
            F.when(wrongly_refused, "internal_error").otherwise(F.col("reason")).alias("reason"),
            "detail",
            F.when(~wrongly_refused, F.col("receipt")).alias("receipt"),
            F.to_date(F.lit(at)).alias("event_day"),
        )
        .write.format("delta")
        .partitionBy("event_day")
        .save(str(settings.master_dataset_dir))
    )
    later = at + timedelta(minutes=5)
    produce_raw(
        settings,
        [receipt_json(1, 1, 1, at), receipt_json(1, 1, 2, later), b"{not json"],
        timestamps=[ms(later), ms(later), ms(later)],
        keys=[device_key(1, 1), device_key(1, 1), None],
    )
    _archive(spark, settings)

    stored = spark.read.format("delta").load(str(settings.master_dataset_dir))
    assert "receipt" in stored.columns  # the old columns stay, null on the new rows
    assert stored.where(F.col("receipt").isNotNull()).count() == 1
    result = job.run(spark, settings, ALL_DAYS)
    assert (
        result.input_rows,
        result.invalid_rows,
        result.receipts,
        result.duplicates_removed,
    ) == (5, 1, 3, 1)
    assert set(served_receipts(cql)) == {(1, 1, 1), (1, 1, 2), (1, 1, 3)}


def _one_more_receipt(spark: Any, settings: Settings) -> tuple[tuple[int, datetime], Any]:
    """Store 9002's one receipt (2 x 1.90 at 10:00:01 on 4 March) archived: the newest
    table version holds it; its window's literal aggregate."""
    at = datetime(2026, 3, 4, 10, 0, 1, tzinfo=UTC)
    produce_raw(settings, [receipt_json(9002, 1, 1, at)], [ms(at)], [device_key(9002, 1)])
    _archive(spark, settings)
    return (9002, datetime(2026, 3, 4, 10, 0)), (1, 2, Decimal("3.80"), 0)


def test_no_command_makes_final_wrong_future_interval_pinned_rerun_take_over(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    """A future interval is refused before anything is written; a rerun pinned to an
    older table version writes its version but never rolls a served day back, unless
    asked with take_over."""
    from pos_lambda.batch_layer.interval import IntervalError
    from pos_lambda.batch_layer.pointer import BatchStore

    settings, cql = isolated
    ledger = tmp_path / "ledger"
    send(settings, _simulate(ledger, count=300, seed=3, faults=FaultConfig(resend_rate=0.1)))
    _archive(spark, settings)
    first = job.run(spark, settings, ALL_DAYS)
    want = expected_aggregates(ledger)
    assert served_aggregates(cql) == want

    # Tomorrow's hour: refused, and no run is even recorded.
    tomorrow = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    with pytest.raises(IntervalError, match="in the future"):
        job.run(spark, settings, Interval(tomorrow, tomorrow + timedelta(hours=1)))
    assert len(cql.execute(f"SELECT run_id FROM {tables.BATCH_RUNS_TABLE}").all()) == 1

    window, aggregate = _one_more_receipt(spark, settings)
    newer = job.run(spark, settings, ALL_DAYS)
    assert newer.delta_version > first.delta_version
    want[window] = aggregate
    assert served_aggregates(cql) == want
    pointers = _pointers(cql)

    # The rerun pinned to the first table version: written, inspectable, not served.
    pinned = job.run(spark, settings, ALL_DAYS, delta_version=first.delta_version)
    assert (pinned.delta_version, pinned.days_committed) == (first.delta_version, 0)
    assert _pointers(cql) == pointers
    assert served_aggregates(cql) == want
    with BatchStore(settings) as store:
        run = store.run(pinned.run_id)
    assert run is not None and run.status == "written"
    partitions = f"SELECT DISTINCT operation_id, day, version FROM {tables.AGG_BATCH_TABLE}"
    stored = {r.version for r in cql.execute(partitions)}
    assert pinned.version in stored

    # Asked explicitly: the operator's rollback serves the older table version, rebuilt
    # as a generation; the next run folds what came after it, once.
    rolled = job.run(spark, settings, ALL_DAYS, delta_version=first.delta_version, take_over=True)
    assert (rolled.mode, rolled.delta_version) == ("build", first.delta_version)
    assert set(_pointers(cql).values()) == {rolled.version}
    del want[window]
    assert served_aggregates(cql) == want
    caught_up = job.run(spark, settings, ALL_DAYS)
    assert (caught_up.mode, caught_up.receipts) == ("fold", 1)
    want[window] = aggregate
    assert served_aggregates(cql) == want


@pytest.mark.parametrize("retries", [0, 2])
def test_two_racing_commits_exactly_one_wins_and_the_served_rows_stay_exact(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path, retries: int
) -> None:
    """Run B reads the pointer and the table, then pauses before its commit; run A, over
    a newer table version, commits meanwhile. B's commit must be refused (without the
    conditional write it would serve its older version over A's): status `conflict`.
    With `--conflict-retries 0` B exits 3 and A's rows are served; with the default
    retries B recomputes at once on what A committed, and commits. Either way the served
    rows are exact."""
    from pos_lambda.adapters.service import wait_for

    settings, cql = isolated
    ledger = tmp_path / "ledger"
    send(settings, _simulate(ledger, count=300, seed=4, faults=FaultConfig(resend_rate=0.1)))
    _archive(spark, settings)
    go, log_file = tmp_path / "go", tmp_path / "b.log"
    env = env_for(settings) | {"POS_BATCH_PAUSE_BEFORE_COMMIT": str(go)}
    with open(log_file, "w") as log:
        b = subprocess.Popen(
            [str(VENV_BIN / "pos-batch"), "run", "--start", "2026-03-01T00:00Z",
             "--end", "2026-03-14T00:00Z", "--conflict-retries", str(retries)],
            env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        assert wait_for(
            lambda: (
                "failpoint batch.before_commit reached" in log_file.read_text()
                or b.poll() is not None
            ),
            timeout=600,
        )
        assert b.poll() is None, log_file.read_text()[-3000:]
        window, aggregate = _one_more_receipt(spark, settings)
        a = job.run(spark, settings, ALL_DAYS)
        go.touch()
        assert b.wait(timeout=300) == (3 if retries == 0 else 0), log_file.read_text()[-3000:]
    finally:
        if b.poll() is None:
            b.kill()
    log_text = log_file.read_text()
    assert "another batch run committed the pointer" in log_text
    if retries == 0:
        assert set(_pointers(cql).values()) == {a.version}
    else:
        assert "recomputing on what it committed (retry 1 of 2)" in log_text
    want = expected_aggregates(ledger)
    want[window] = aggregate
    assert served_aggregates(cql) == want
    statuses = sorted(
        r.status for r in cql.execute(f"SELECT status FROM {tables.BATCH_RUNS_TABLE}")
    )
    assert statuses == (["committed", "conflict"] if retries == 0 else
                        ["committed", "committed", "conflict"])  # fmt: skip


def _served_rows(cql: Any) -> dict[tuple[int, datetime], tuple[Any, ...]]:
    """Every measure of the served batch aggregates, absorbed duplicates included."""
    return {
        (r.operation_id, r.window_start): (
            r.receipt_count,
            r.item_quantity,
            Decimal(r.revenue),
            r.late_count,
            r.duplicates,
            r.conflicts,
            r.beyond_speed_bound,
        )
        for r in _served_windows(cql)
    }


def test_hourly_folds_stay_exact_with_late_copies_and_equal_a_full_rebuild(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    """The stream arrives in three parts, each archived and folded by a run. Copies of
    one receipt span days and folds: its first copy (2 March 23:59:50) comes in the
    first part; a resend and a conflicting copy dated 3 March come in the last, after
    2 March was final. The views must equal the ledger after every fold, and a rebuild
    from every record must serve the very same rows."""
    settings, cql = isolated
    ledger = tmp_path / "ledger"
    messages = _simulate(
        ledger,
        count=900,
        seed=21,
        faults=FaultConfig(
            resend_rate=0.08, malformed_rate=0.02, late_rate=0.1, late_max_delay_s=3 * 86400.0
        ),
    )
    first = datetime(2026, 3, 2, 23, 59, 50, tzinfo=UTC)
    other = datetime(2026, 3, 3, 0, 0, 10, tzinfo=UTC)
    key = device_key(9001, 1)
    modes = []
    store_9001 = (9001, 1, 1, first)
    gaps_after_first_part: dict[Any, Any] = {}
    for n, part in enumerate((messages[:300], messages[300:600], messages[600:])):
        send(settings, part)
        if n == 0:
            produce_raw(settings, [receipt_json(9001, 1, 1, first)], [ms(first)], [key])
        if n == 2:
            produce_raw(
                settings,
                [
                    receipt_json(9001, 1, 1, first),  # a resend, days later
                    receipt_json(
                        9001, 1, 1, other, [{"title": "Tea", "price": "2.50", "amount": 1}]
                    ),
                ],
                [ms(other) + 86_400_000] * 2,
                [key, key],
            )
        _archive(spark, settings)
        modes.append(job.run(spark, settings, ALL_DAYS).mode)
        if n == 0:
            # The gaps view of the build: late receipts of later parts are holes now.
            gaps_after_first_part = served_gaps(cql)
            sent = _sent_receipts(messages[:300], ledger)
            assert gaps_after_first_part == expected_gaps([*sent, store_9001])
    assert modes == ["build", "fold", "fold"]
    # The folds' late receipts filled every hole the build saw (the stream lost none).
    assert sum(len(g[3]) for g in gaps_after_first_part.values()) > 0
    every_receipt = _sent_receipts(messages, ledger)
    assert len(every_receipt) == len(ledger_files.load_receipts(ledger))
    complete = expected_gaps([*every_receipt, store_9001])
    assert all(g[3] == [] for g in complete.values())
    assert served_gaps(cql) == complete

    want = expected_aggregates(ledger)
    want[(9001, datetime(2026, 3, 2, 23, 45))] = (1, 2, Decimal("3.80"), 0)
    assert served_aggregates(cql) == want
    expected_receipts = ledger_files.load_receipts(ledger)
    assert set(served_receipts(cql)) == {*expected_receipts, (9001, 1, 1)}
    folded_rows = _served_rows(cql)
    resends = sum(int(r["copies"]) - 1 for r in expected_receipts.values())
    assert sum(r[4] for r in folded_rows.values()) == resends + 2  # + 9001's two copies
    assert folded_rows[(9001, datetime(2026, 3, 2, 23, 45))][4:6] == (2, 1)
    folded_receipts = {
        k: (r.item_quantity, Decimal(r.revenue), r.late, r.kafka_offset)
        for k, r in served_receipts(cql).items()
    }

    # A view added to a running deployment: days whose versions hold no gaps rows (as a
    # release before the view committed them) answer "not yet backfilled" from the speed
    # view, until the rebuild below backfills the view from the master dataset.
    cql.execute(f"TRUNCATE {tables.GAPS_BATCH_TABLE}")
    store, day = 9001, datetime(2026, 3, 2).date()
    with Serving(settings) as serving:
        assert serving.gaps(store, day).basis == "not yet backfilled"

    # The full recompute, in three chunks of natural keys, as the rebuild DAG runs it.
    rebuilt = subprocess.run(
        [str(VENV_BIN / "pos-batch"), "rebuild", "--chunks", "3"],
        env=env_for(settings), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    lines = [json.loads(line) for line in rebuilt.stdout.strip().splitlines()]
    assert [line["chunk"] for line in lines[:3]] == [0, 1, 2]
    switched = lines[-1]
    assert (switched["receipts"], switched["duplicates"], switched["conflicts"]) == (
        len(expected_receipts) + 1,
        resends + 2,
        1,
    )
    assert set(_pointers(cql).values()) == {switched["generation"]}
    assert _served_rows(cql) == folded_rows
    assert served_gaps(cql) == complete
    with Serving(settings) as serving:
        backfilled = serving.gaps(store, day)
    assert (backfilled.basis, [(d.device, d.first, d.last) for d in backfilled.devices]) == (
        "final",
        [(1, 1, 1)],
    )
    assert {
        k: (r.item_quantity, Decimal(r.revenue), r.late, r.kafka_offset)
        for k, r in served_receipts(cql).items()
    } == folded_receipts
