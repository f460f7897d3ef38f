"""bench/batch_history.py's pure parts: the generator's arithmetic (what the served
views are checked against), the run's time breakdown from a Spark event log, the
figures, and the refusal of shapes it cannot generate."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from bench import batch_history
from bench.batch_history import Shape

NOON = datetime(2026, 11, 2, 12, tzinfo=UTC)


def test_a_receipt_follows_the_documented_formula() -> None:
    shape = Shape(20_000)  # two hours of history: 10:00 and 11:00, the new hour at noon
    assert (shape.hours, shape.per_device, shape.spacing) == (2, 20, 180)
    first = shape.receipt(0, 0)
    assert (first.operation_id, first.vendor_fiscal_module, first.transaction_id) == (101, 1, 1)
    assert first.happened_at == datetime(2026, 11, 2, 10, tzinfo=UTC)
    assert first.kafka_timestamp == datetime(2026, 11, 2, 10, 0, 2, tzinfo=UTC)
    assert (first.quantity, first.revenue, first.late) == (1, Decimal("1.00"), False)
    assert first.kafka_partition == zlib.crc32(b"101:1") % 4
    # Receipt 501 of hour 1: g = 10,501, device 1 (store 101, device 2), its 2nd receipt
    # of the hour: number 20 + 1 + 1, at 11:00 + 180 s + 1 s + 531 ms (10,501 % 997).
    r = shape.receipt(1, 501)
    assert (r.operation_id, r.vendor_fiscal_module, r.transaction_id) == (101, 2, 22)
    assert r.happened_at == datetime(2026, 11, 2, 11, 3, 1, 531_000, tzinfo=UTC)
    assert r.kafka_timestamp == datetime(2026, 11, 2, 11, 3, 4, 531_000, tzinfo=UTC)
    assert (r.quantity, r.cents, r.revenue) == (2, 201, Decimal("4.02"))
    assert r.window == (101, datetime(2026, 11, 2, 11, tzinfo=UTC))


def test_offsets_are_sequential_per_partition_receipts_first_then_resends() -> None:
    shape = Shape(20_000)
    for h in range(shape.hours + 1):
        receipts: dict[int, list[int]] = {}
        for j in range(shape.new):
            r = shape.receipt(h, j)
            receipts.setdefault(r.kafka_partition, []).append(r.kafka_offset)
        resends: dict[int, list[int]] = {}
        for original, _, offset in shape.resends(h):
            resends.setdefault(original.kafka_partition, []).append(offset)
        for p, offsets in receipts.items():
            base = h * shape.per_hour[p]
            assert sorted(offsets) == list(range(base, base + len(offsets)))
            copies = sorted(resends.get(p, []))
            assert copies == list(range(base + len(offsets), base + len(offsets) + len(copies)))
    # 0.5 %: 50 resends an hour (none in the first hour: nothing before it to resend).
    assert [len(list(shape.resends(h))) for h in range(3)] == [0, 50, 50]


def tiny(late: bool = False) -> Shape:
    """One store of 10 devices, one receipt per device an hour, all in the hour's first
    window (second d of the hour); device 0 resends its receipt in the next hour."""
    return Shape(history=20, new=10, stores=1, devices_per_store=10, partitions=2,
                 new_hour=NOON, late=late)  # fmt: skip


def at(hour: int, day: int = 2) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def test_expected_aggregates_are_the_generators_arithmetic() -> None:
    # Hour h's receipts are g = 10h .. 10h+9: quantity 1 + g % 3, price (100 + g) cents.
    # Hour 0 (10:00): quantities 1,2,3,1,2,3,1,2,3,1 = 19; revenue 1.00 + 2.02 + 3.06 +
    # 1.03 + 2.08 + 3.15 + 1.06 + 2.14 + 3.24 + 1.09 = 19.87. Hour 1 (g 10..19):
    # quantities 2,3,1,2,3,1,2,3,1,2 = 20; revenue 2.20 + 3.33 + 1.12 + 2.26 + 3.42 +
    # 1.15 + 2.32 + 3.51 + 1.18 + 2.38 = 22.87. Noon (g 20..29): 3,1,2,3,1,2,3,1,2,3 = 21;
    # 3.60 + 1.21 + 2.44 + 3.69 + 1.24 + 2.50 + 3.78 + 1.27 + 2.56 + 3.87 = 26.16.
    # Device 0's resend of hour h's receipt arrives in hour h + 1: a duplicate in hour h.
    before = batch_history.expected(tiny(), [date(2026, 11, 2)], with_new_hour=False)
    assert before == {
        (101, at(10)): (10, 19, Decimal("19.87"), 0, 1, 0, 0),
        (101, at(11)): (10, 20, Decimal("22.87"), 0, 0, 0, 0),  # its resend: in the new hour
    }
    after = batch_history.expected(tiny(), [date(2026, 11, 2)])
    assert after == {
        (101, at(10)): (10, 19, Decimal("19.87"), 0, 1, 0, 0),
        (101, at(11)): (10, 20, Decimal("22.87"), 0, 1, 0, 0),
        (101, at(12)): (10, 21, Decimal("26.16"), 0, 0, 0, 0),
    }


def test_late_data_moves_every_20th_new_receipt_30_hours_back_and_late() -> None:
    # Receipt g = 20 (j = 0 of the new hour) happened at 06:00 the day before, reached
    # Kafka at 12:00:02 + 20 % 3 s: quantity 3, 1.20 each, late.
    shape = tiny(late=True)
    assert shape.touched_days() == [date(2026, 11, 1), date(2026, 11, 2)]
    got = batch_history.expected(shape, shape.touched_days())
    assert got[(101, at(6, day=1))] == (1, 3, Decimal("3.60"), 1, 0, 0, 0)
    assert got[(101, at(12))] == (9, 18, Decimal("22.56"), 0, 0, 0, 0)


def test_the_floor_counts_the_new_hours_resends_as_receipts_it_cannot_tell() -> None:
    # The floor reads the new table version only: device 0's resend of its 11:00 receipt
    # (g = 10: quantity 2 at 1.10) has no original there, so it counts as a receipt,
    # late by its own arrival (12:01, over an hour after it happened).
    got = batch_history.floor_expected(tiny())
    assert got == {
        (101, at(11)): (1, 2, Decimal("2.20"), 1),
        (101, at(12)): (10, 21, Decimal("26.16"), 0),
    }


def test_the_state_covers_its_days_as_the_previous_hourly_run_left_them() -> None:
    shape = Shape(1_000_000)  # 100 hours: from 31 October 08:00
    assert shape.origin == datetime(2026, 10, 29, 8, tzinfo=UTC)
    assert shape.history_days[0] == date(2026, 10, 29) and shape.history_days[-1] == shape.day
    assert batch_history.covered_until(shape, date(2026, 11, 1)) == at(0)
    assert batch_history.covered_until(shape, shape.day) == NOON
    assert shape.aggregated_days == [date(2026, 11, 1), date(2026, 11, 2)]
    assert list(shape.hours_of(date(2026, 11, 2))) == list(range(88, 101))


def test_breakdown_splits_the_wall_clock_by_action_and_counts_only_saves_as_writes() -> None:
    sql = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecution"
    events = [
        {"Event": "SparkListenerApplicationStart", "Timestamp": 1_000},
        {"Event": f"{sql}Start", "executionId": 0, "rootExecutionId": 0,
         "description": "count at NativeMethodAccessorImpl.java:0", "time": 2_000},
        {"Event": f"{sql}End", "executionId": 0, "time": 3_000},
        {"Event": f"{sql}Start", "executionId": 1, "rootExecutionId": 1,
         "description": "save at NativeMethodAccessorImpl.java:0", "time": 4_000},
        {"Event": f"{sql}Start", "executionId": 2, "rootExecutionId": 1,
         "description": "nested", "time": 4_500},
        {"Event": f"{sql}End", "executionId": 2, "time": 5_000},
        {"Event": f"{sql}End", "executionId": 1, "time": 6_000},
        {"Event": "SparkListenerJobStart", "Job ID": 7, "Submission Time": 7_000,
         "Properties": {}},
        {"Event": "SparkListenerJobEnd", "Job ID": 7, "Completion Time": 7_500},
    ]  # fmt: skip
    got = batch_history.breakdown(events, 0, 9_000)
    assert got == {
        "wall_s": 9.0, "startup_s": 1.0, "to_first_action_s": 2.0, "actions": 3,
        "actions_s": 3.5, "write_s": 2.0, "non_write_s": 7.0,
        "driver_between_actions_s": 2.0, "after_last_action_s": 1.5,
        "actions_by_name_s": {"save": 2.0, "count": 1.0, "job outside SQL": 0.5},
    }  # fmt: skip


def run(history: int, run_s: float, late: bool = False, **more: object) -> dict[str, object]:
    return {"history": history, "new": 10_000, "late": late, "run_s": run_s, "exact": True,
            "rows_written": {"receipts_batch": 10_000, "agg_15m_batch": 5_200,
                             "conflicts": 0, "receipt_keys_batch": 10_000},
            "breakdown": {"non_write_s": 20.0}, "generation_s": {"total": 60.0},
            **more}  # fmt: skip


def test_figures_put_the_scaling_first_and_count_rows_per_new_receipt() -> None:
    runs = [
        run(1_000_000, 40.0, floor={"seconds": 0.5, "work_s": 0.3, "problems": []}),
        run(1_000_000, 41.0, late=True),
        run(10_000_000, 42.0),
        run(50_000_000, 44.0),
        {**run(20_000_000, 99.0), "exact": False},  # an inexact run does not count
        {**run(30_000_000, 99.0), "code": "other"},  # nor one of other code (shared checkout)
    ]
    figures = batch_history.figures(runs)
    head = figures[0]
    assert head.name == "hourly run, 50,000,000 records of history"
    assert head.ratio == 44.0 / 40.0 and head.goal is not None and head.goal.met(head.ratio)
    by_name = {f.name: f for f in figures}
    views = by_name["view rows written by the hourly run (no late data, 1,000,000 history)"]
    assert views.ratio == 1.52 and views.goal is not None and views.goal.met(views.ratio)
    every = by_name["all rows written, the index's included (no late data, 1,000,000 history)"]
    assert every.ratio == 2.52 and every.goal is None
    floor = by_name["hourly run's non-write time, 1,000,000 history"]
    assert floor.ratio == 40.0
    assert not any("20,000,000" in f.name or "30,000,000" in f.name
                   for f in figures if f.ratio is not None)  # fmt: skip


def test_shapes_it_cannot_generate_are_refused_with_what_to_do(
    refusal: Callable[..., str],
) -> None:
    assert "must be a positive multiple of the 500 devices" in refusal(
        "batch_history", "--new", "10001"
    )
    assert "must be a positive multiple of --new 10,000 (whole hours)" in refusal(
        "batch_history", "--sizes", "15000"
    )
    assert "--sizes names no history size" in refusal("batch_history", "--sizes", "")
    assert "comma-separated whole numbers" in refusal("batch_history", "--sizes", "1M")


def test_the_late_shift_lands_on_the_previous_day() -> None:
    # 30 h before noon is 06:00 the day before: the previous day, as the issue asks.
    assert (NOON - batch_history.LATE_SHIFT).date() == NOON.date() - timedelta(days=1)


def test_the_runs_own_row_counts_are_compared_with_the_tables() -> None:
    counted = {"receipts_batch": 10_000, "agg_15m_batch": 5_200, "conflicts": 0,
               "receipt_keys_batch": 10_000}  # fmt: skip
    same = {"view_rows_written": 15_200, "index_rows_written": 10_000}
    assert batch_history.reported_vs_counted(same, counted) == []
    assert batch_history.reported_vs_counted({}, counted) == []  # a run that does not say
    assert batch_history.reported_vs_counted({**same, "index_rows_written": 10_050}, counted) == [
        "index_rows_written 10,050 != 10,000 counted"
    ]
