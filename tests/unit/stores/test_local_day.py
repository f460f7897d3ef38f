"""A local business day as UTC 15-minute windows: +05:45, DST spring-forward and fall-back."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from pos_lambda.stores.local_day import UnalignedDay, local_day_bounds, utc_windows


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_kathmandu_day_is_96_windows_starting_at_18_15_utc() -> None:
    windows = utc_windows(date(2026, 3, 2), ZoneInfo("Asia/Kathmandu"))
    assert len(windows) == 96
    assert windows[0] == _utc(2026, 3, 1, 18, 15)
    assert windows[-1] == _utc(2026, 3, 2, 18, 0)
    assert windows[1] == _utc(2026, 3, 1, 18, 30)


def test_spring_forward_day_has_92_windows() -> None:
    # New York, Sunday 8 March 2026: 02:00 EST becomes 03:00 EDT.
    windows = utc_windows(date(2026, 3, 8), ZoneInfo("America/New_York"))
    assert len(windows) == 92
    assert (windows[0], windows[-1]) == (_utc(2026, 3, 8, 5), _utc(2026, 3, 9, 3, 45))
    # Bratislava, Sunday 29 March 2026: 02:00 CET becomes 03:00 CEST.
    assert local_day_bounds(date(2026, 3, 29), ZoneInfo("Europe/Bratislava")) == (
        _utc(2026, 3, 28, 23),
        _utc(2026, 3, 29, 22),
    )
    assert len(utc_windows(date(2026, 3, 29), ZoneInfo("Europe/Bratislava"))) == 92


def test_fall_back_day_has_100_windows() -> None:
    # Bratislava, Sunday 25 October 2026: 03:00 CEST becomes 02:00 CET.
    windows = utc_windows(date(2026, 10, 25), ZoneInfo("Europe/Bratislava"))
    assert len(windows) == 100
    assert (windows[0], windows[-1]) == (_utc(2026, 10, 24, 22), _utc(2026, 10, 25, 22, 45))
    assert len(utc_windows(date(2026, 11, 1), ZoneInfo("America/New_York"))) == 100


def test_consecutive_local_days_tile_utc_time_without_gap_or_overlap() -> None:
    zone = ZoneInfo("America/New_York")
    days = [date(2026, 3, d) for d in range(6, 11)]
    windows = [w for d in days for w in utc_windows(d, zone)]
    assert len(windows) == 4 * 96 + 92
    assert windows == sorted(set(windows))
    assert all(b - a == windows[1] - windows[0] for a, b in itertools.pairwise(windows))


def test_half_hour_dst_and_dst_at_midnight() -> None:
    # Lord Howe Island moves its clocks by 30 minutes (5 April 2026: back).
    assert len(utc_windows(date(2026, 4, 5), ZoneInfo("Australia/Lord_Howe"))) == 98
    # Santiago skips midnight (6 September 2026): the day begins at 01:00 local.
    assert local_day_bounds(date(2026, 9, 6), ZoneInfo("America/Santiago")) == (
        _utc(2026, 9, 6, 4),
        _utc(2026, 9, 7, 3),
    )


def test_a_local_mean_time_day_is_refused() -> None:
    with pytest.raises(UnalignedDay, match="not on a 15-minute UTC boundary"):
        utc_windows(date(1930, 1, 1), ZoneInfo("Europe/Amsterdam"))
