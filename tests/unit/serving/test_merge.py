"""The serving merge on literal rows: one source per window, never both, never neither."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime
from decimal import Decimal
from types import SimpleNamespace

from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.serving.merge import (
    batch_split,
    daily_totals,
    merge_windows,
    receipt_segments,
    served_conflicts,
    top_stores,
    totals,
)
from pos_lambda.serving.model import AggregateRow, DayVersion, Pointer, Segment

D = date(2026, 3, 2)


def at(h: int, m: int = 0, d: int = 2) -> datetime:
    return datetime(2026, 3, d, h, m, tzinfo=UTC)


def agg(
    store: int, ws: datetime, n: int, revenue: str, version: str | None = None, late: int = 0
) -> AggregateRow:
    return AggregateRow(store, ws, Aggregate(n, 2 * n, Decimal(revenue), late), version)


# The batch committed 2 March up to 10:00 (horizon 10:00) under version v2.
POINTER = Pointer(at(10), {D: DayVersion(D, "v2", at(10))})
BATCH = [
    agg(101, at(9, 30), 3, "7.50", "v2"),
    agg(101, at(9, 45), 2, "5.00", "v2", late=1),
    agg(101, at(9, 45), 9, "99.00", "v1"),  # an older version: not served
    agg(101, at(9, 15), 7, "70.00", "orphan"),  # a killed run's rows: not served
]
# The speed view holds every window it saw, before and after the horizon; at 09:45 it
# missed the late receipt the batch found, at 09:30 it counted a resend twice.
SPEED = [
    agg(101, at(9, 30), 4, "10.00"),
    agg(101, at(9, 45), 1, "2.50"),
    agg(101, at(10, 0), 5, "12.50"),
    agg(101, at(10, 15), 1, "2.50"),
    agg(102, at(10, 0), 8, "20.00"),  # another store
]


def test_each_window_has_one_source_split_at_the_horizon() -> None:
    rows = merge_windows(101, at(9, 30), at(10, 30), POINTER, BATCH, SPEED)
    assert [
        (w.window_start, w.receipt_count, w.revenue, w.source, w.final, w.version) for w in rows
    ] == [
        (at(9, 30), 3, Decimal("7.50"), "batch", True, "v2"),
        (at(9, 45), 2, Decimal("5.00"), "batch", True, "v2"),
        (at(10, 0), 5, Decimal("12.50"), "speed", False, None),
        (at(10, 15), 1, Decimal("2.50"), "speed", False, None),
    ]
    assert rows[1].late_count == 1 and rows[1].window_end == at(10)


def test_naive_union_all_double_counts_where_the_merge_does_not() -> None:
    served = [r for r in BATCH if r.version == "v2"]  # even with the pointer followed
    union_all = [r for r in [*served, *SPEED] if r.operation_id == 101]
    assert sum(r.aggregate.receipt_count for r in union_all) == 16
    assert sum(r.aggregate.revenue for r in union_all) == Decimal("40.00")
    # The truth: 3 + 2 receipts before the horizon (batch), 5 + 1 after it (speed).
    merged = totals(merge_windows(101, at(9, 30), at(10, 30), POINTER, BATCH, SPEED))
    assert (merged.receipt_count, merged.revenue) == (11, Decimal("27.50"))
    assert (merged.batch_windows, merged.speed_windows) == (2, 2)


def test_every_window_of_the_range_once_even_where_no_view_has_rows() -> None:
    rows = merge_windows(101, at(0), at(0, d=3), POINTER, BATCH, SPEED)
    assert len(rows) == 96
    assert not [ws for ws, n in Counter(w.window_start for w in rows).items() if n > 1]
    assert [w.source for w in rows] == ["batch"] * 40 + ["speed"] * 56  # 10:00 = 40th
    assert rows[0].receipt_count == 0 and rows[0].revenue == Decimal("0.00")


def test_windows_in_one_view_only_still_appear() -> None:
    # Only the batch saw 09:00 (a receipt beyond the speed layer's lateness bound);
    # only the speed view has 11:00 (after the horizon).
    batch = [agg(101, at(9), 1, "4.00", "v2")]
    speed = [agg(101, at(11), 2, "3.00")]
    rows = merge_windows(101, at(9), at(11, 15), POINTER, batch, speed)
    got = {(w.window_start, w.source): w.receipt_count for w in rows if w.receipt_count}
    assert got == {(at(9), "batch"): 1, (at(11), "speed"): 2}


def test_a_window_cut_by_covered_until_or_the_horizon_stays_with_speed() -> None:
    # covered_until 10:00 on day 2, but the horizon lags at 09:45 (a commit read
    # between the two pointer reads): the horizon caps too.
    pointer = Pointer(at(9, 45), {D: DayVersion(D, "v2", at(10))})
    rows = merge_windows(101, at(9, 30), at(10), pointer, BATCH, SPEED)
    assert [(w.source, w.receipt_count) for w in rows] == [("batch", 3), ("speed", 1)]


def test_no_pointer_or_no_horizon_means_all_speed() -> None:
    for pointer in (Pointer(None, {}), Pointer(None, {D: DayVersion(D, "v2", at(10))})):
        rows = merge_windows(101, at(9, 30), at(10), pointer, BATCH, SPEED)
        assert [(w.source, w.receipt_count) for w in rows] == [("speed", 4), ("speed", 1)]


def test_a_day_without_a_pointer_row_is_speed_even_before_the_horizon() -> None:
    # The horizon is on 3 March, but 1 March was never recomputed.
    pointer = Pointer(at(6, d=3), {D: DayVersion(D, "v2", at(0, d=3))})
    speed = [agg(101, at(23, 45, d=1), 2, "1.00")]
    rows = merge_windows(101, at(23, 45, d=1), at(0, 15), pointer, [], speed)
    assert [(w.source, w.receipt_count) for w in rows] == [("speed", 2), ("batch", 0)]


def test_range_start_inside_a_window_starts_at_that_window() -> None:
    rows = merge_windows(101, at(9, 40), at(9, 50), POINTER, BATCH, SPEED)
    assert [w.window_start for w in rows] == [at(9, 30), at(9, 45)]


def test_daily_totals_final_only_when_batch_answered_the_whole_day() -> None:
    pointer = Pointer(at(0, d=3), {D: DayVersion(D, "v2", at(0, d=3))})
    rows = merge_windows(101, at(0), at(10, d=3), pointer, BATCH, SPEED)
    [day2, day3] = daily_totals(rows)
    assert (day2.day, day2.receipt_count, day2.revenue, day2.final) == (
        D,
        5,
        Decimal("12.50"),
        True,
    )
    assert (day3.day, day3.receipt_count, day3.batch_windows, day3.speed_windows, day3.final) == (
        date(2026, 3, 3),
        0,
        0,
        40,
        False,
    )


def test_top_stores_rank_merged_days() -> None:
    ranked = top_stores(D, POINTER, BATCH, SPEED, limit=5)
    assert [(d.operation_id, d.receipt_count, d.revenue) for d in ranked] == [
        (101, 11, Decimal("27.50")),
        (102, 8, Decimal("20.00")),
    ]
    assert [d.operation_id for d in top_stores(D, POINTER, BATCH, SPEED, limit=1)] == [101]


def test_top_stores_leave_out_stores_whose_merged_day_is_empty() -> None:
    # Store 103's only speed row is in a window the batch answers with nothing
    # (a late receipt the next batch run will take in).
    speed = [*SPEED, agg(103, at(8), 1, "1.00")]
    assert 103 not in [d.operation_id for d in top_stores(D, POINTER, BATCH, speed, 10)]


def test_batch_split_is_where_the_covered_prefix_of_the_day_ends() -> None:
    assert batch_split(POINTER, D) == at(10)
    assert batch_split(Pointer(None, {}), D) == at(0)
    assert batch_split(Pointer(at(0, d=4), {D: DayVersion(D, "v", at(0, d=3))}), D) == at(0, d=3)


def test_a_utc_day_of_receipts_is_the_batch_prefix_then_the_speed_rest() -> None:
    assert receipt_segments(POINTER, at(0), at(0, d=3)) == [
        Segment("batch", D, at(0), at(10), "v2"),
        Segment("speed", D, at(10), at(0, d=3)),
    ]
    assert receipt_segments(Pointer(None, {}), at(0), at(0, d=3)) == [
        Segment("speed", D, at(0), at(0, d=3))
    ]
    whole = Pointer(at(0, d=4), {D: DayVersion(D, "v", at(0, d=3), "g5", 12)})
    assert receipt_segments(whole, at(0), at(0, d=3)) == [
        Segment("batch", D, at(0), at(0, d=3), "g5@12")
    ]


def test_a_local_day_reads_the_slices_of_two_utc_days_each_split_at_its_own_seam() -> None:
    # Kathmandu's 2 March is [1 March 18:15, 2 March 18:15) UTC; the batch committed 1
    # March whole and 2 March up to 10:00: three segments, in time order, none overlapping.
    d1 = date(2026, 3, 1)
    pointer = Pointer(at(10), {d1: DayVersion(d1, "v1", at(0)), D: DayVersion(D, "v2", at(10))})
    assert receipt_segments(pointer, at(18, 15, d=1), at(18, 15)) == [
        Segment("batch", d1, at(18, 15, d=1), at(0), "v1"),
        Segment("batch", D, at(0), at(10), "v2"),
        Segment("speed", D, at(10), at(18, 15)),
    ]
    # A local day that ends before the seam has no speed segment; one that starts after
    # it, no batch segment.
    assert receipt_segments(pointer, at(2), at(9)) == [Segment("batch", D, at(2), at(9), "v2")]
    assert receipt_segments(pointer, at(11), at(13)) == [Segment("speed", D, at(11), at(13))]


def test_a_25_hour_local_day_may_touch_three_utc_days() -> None:
    # [1 March 23:30, 3 March 00:30): a fall-back day of a zone at a half-hour offset.
    segments = receipt_segments(Pointer(None, {}), at(23, 30, d=1), at(0, 30, d=3))
    assert [(g.day.day, g.start, g.end) for g in segments] == [
        (1, at(23, 30, d=1), at(0)),
        (2, at(0), at(0, d=3)),
        (3, at(0, d=3), at(0, 30, d=3)),
    ]


def test_a_days_conflicts_come_from_the_served_batch_version_where_it_answers() -> None:
    """Issue 62 case 5: a conflict the served batch version does not count is not shown.
    Batch rows: one its commit counts (master_version 4 <= 5), one of a fold not yet
    committed (6), one past the covered prefix (10:30, speed answers there). Speed rows:
    one the batch resolved otherwise (09:00, in the prefix), one after the seam."""
    row = SimpleNamespace
    batch = [
        row(winner_happened_at=at(9), master_version=4, name="batch counted"),
        row(winner_happened_at=at(9, 15), master_version=6, name="batch not committed"),
        row(winner_happened_at=at(10, 30), master_version=4, name="batch past the seam"),
    ]
    speed = [
        row(winner_happened_at=at(9), name="speed in the prefix"),
        row(winner_happened_at=at(10), name="speed at the seam"),
        row(winner_happened_at=at(11), name="speed after"),
    ]
    served = served_conflicts(batch, speed, at(10), 5)
    assert [r.name for r in served] == ["batch counted", "speed at the seam", "speed after"]
    # A day the batch does not answer at all (split at the day's start): speed only.
    assert [r.name for r in served_conflicts(batch, speed, at(0), 5)] == [
        "speed in the prefix",
        "speed at the seam",
        "speed after",
    ]
