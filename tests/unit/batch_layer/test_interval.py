from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from pos_lambda.batch_layer.cli import main
from pos_lambda.batch_layer.interval import Interval, IntervalError, parse_instant


def at(h: int, m: int = 0, d: int = 2) -> datetime:
    return datetime(2026, 3, d, h, m, tzinfo=UTC)


def test_parse_instant_accepts_z_offsets_and_dates() -> None:
    assert parse_instant("2026-03-02T08:00:00Z") == at(8)
    assert parse_instant("2026-03-02T10:00:00+02:00") == at(8)
    assert parse_instant("2026-03-02") == at(0)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("yesterday", "not an ISO-8601"), ("2026-03-02T08:00:00", "no UTC offset")],
)
def test_parse_instant_refuses_with_reason(text: str, reason: str) -> None:
    with pytest.raises(IntervalError, match=reason):
        parse_instant(text)


def test_inverted_empty_and_unaligned_intervals_are_refused() -> None:
    with pytest.raises(IntervalError, match="inverted"):
        Interval(at(9), at(8))
    with pytest.raises(IntervalError, match="inverted"):
        Interval(at(8), at(8))
    with pytest.raises(IntervalError, match="15-minute"):
        Interval(at(8, 7), at(9))
    with pytest.raises(IntervalError, match="negative"):
        Interval(at(8), at(9), timedelta(hours=-1))


def test_days_recomputed_whole_back_to_the_lookback() -> None:
    i = Interval(at(1), at(2), timedelta(hours=48))
    assert i.recompute_start == datetime(2026, 2, 28, tzinfo=UTC)
    assert i.days == [date(2026, 2, 28), date(2026, 3, 1), date(2026, 3, 2)]
    assert i.covered_until(date(2026, 3, 1)) == at(0)
    assert i.covered_until(date(2026, 3, 2)) == at(2)


def test_an_interval_ending_at_midnight_does_not_touch_the_next_day() -> None:
    assert Interval(at(0), at(0, d=3)).days == [date(2026, 3, 2)]


def test_version_key_is_deterministic_per_input() -> None:
    table = "0f8e2a7c-51d3-4b7e-9c1a-2d4b6e8f0a1c"
    i = Interval(at(8), at(9))
    assert i.version_key(table, 7) == "d7-0f8e2a7c-20260302T0000Z-20260302T0900Z"
    assert Interval(at(8), at(9)).version_key(table, 7) == i.version_key(table, 7)
    assert i.version_key(table, 8) != i.version_key(table, 7)
    # A table deleted and created again starts at version 0 once more.
    recreated = "7d3c9b1e-0a2f-4c6d-8e5b-3f1a9c7d2e4b"
    assert i.version_key(recreated, 7) != i.version_key(table, 7)


def test_cli_rejects_inverted_interval_before_starting_spark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--start", "2026-03-02T09:00Z", "--end", "2026-03-02T08:00Z"])
    assert exit_.value.code == 2
    assert "inverted" in capsys.readouterr().err


def test_cli_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "quality" in out and "master" in out


def test_an_interval_that_has_not_ended_is_refused_beyond_the_tolerance() -> None:
    now = at(9, 59)
    Interval(at(8), at(9)).ensure_ended(now)
    Interval(at(9), at(10)).ensure_ended(now)  # one minute early: within two minutes
    with pytest.raises(IntervalError, match="in the future"):
        Interval(at(9), at(10, 15)).ensure_ended(now)
    with pytest.raises(IntervalError, match="in the future"):
        Interval(at(9, d=3), at(10, d=3)).ensure_ended(now)  # tomorrow's hour


def test_pos_batch_run_refuses_a_future_interval_before_starting_spark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    with pytest.raises(SystemExit) as exited:
        main(["run", "--start", f"{tomorrow}T09:00Z", "--end", f"{tomorrow}T10:00Z"])
    assert exited.value.code == 2
    assert "in the future" in capsys.readouterr().err


def test_take_over_without_a_pinned_table_version_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--start", "2026-03-02T08:00Z", "--end", "2026-03-02T09:00Z", "--take-over"])
    assert exited.value.code == 2
    assert "--take-over needs --delta-version" in capsys.readouterr().err
