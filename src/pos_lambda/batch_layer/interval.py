"""The batch run's interval, as plain values (pure; unit-tested without Spark).

A run covers event time [start, end), both UTC and aligned to the 15-minute windows,
and recomputes whole UTC days from `start - lookback` (its days' views are complete
from midnight): receipts that arrived late for earlier windows converge in a later
run. Each day's version is final up to `covered_until` = min(next midnight, end).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from pos_lambda.views.windows import is_window_start

# How far past now an interval's end may lie: the clocks of the Airflow worker and of
# this machine may disagree by seconds, never by this much. Beyond it, the run would
# declare final windows whose receipts have not happened yet (`ensure_ended`).
END_TOLERANCE = timedelta(minutes=2)


class IntervalError(ValueError):
    """An interval the batch job refuses, with the reason a user can act on."""


def parse_instant(text: str) -> datetime:
    """ISO-8601 with an offset (or `Z`), as UTC; a bare date means its UTC midnight."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise IntervalError(
            f"{text!r} is not an ISO-8601 instant (e.g. 2026-03-02T08:00:00+00:00)"
        ) from None
    if len(text) == 10:  # a date: its UTC midnight
        value = value.replace(tzinfo=UTC)
    if value.tzinfo is None:
        raise IntervalError(f"{text!r} has no UTC offset: write it as {text}+00:00")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class Interval:
    start: datetime
    end: datetime
    lookback: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        for name, at in (("start", self.start), ("end", self.end)):
            if at.tzinfo is None:
                raise IntervalError(f"--{name} must be timezone-aware (UTC)")
            if not is_window_start(at):
                raise IntervalError(
                    f"--{name} {at.isoformat()} is not on a 15-minute window boundary "
                    "(a window would be cut in two)"
                )
        if self.end <= self.start:
            raise IntervalError(
                f"empty or inverted interval: --start {self.start.isoformat()} must be "
                f"before --end {self.end.isoformat()}"
            )
        if self.lookback < timedelta(0):
            raise IntervalError("--lookback-hours must not be negative")

    @property
    def recompute_start(self) -> datetime:
        """Midnight (UTC) of the day of `start - lookback`: days are recomputed whole."""
        first = (self.start - self.lookback).astimezone(UTC).date()
        return datetime.combine(first, time(0), tzinfo=UTC)

    @property
    def days(self) -> list[date]:
        """Every UTC day the run recomputes, in order."""
        first = self.recompute_start.date()
        last = (self.end - timedelta(microseconds=1)).astimezone(UTC).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]

    def covered_until(self, day: date) -> datetime:
        """How far into `day` this run's version of it is final."""
        return min(datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC), self.end)

    def ensure_ended(self, now: datetime, tolerance: timedelta = END_TOLERANCE) -> None:
        """Refuse an interval that has not ended yet: its run would mark the windows up
        to its end final from a snapshot that cannot hold their receipts, and no later
        run could take that finality back until the day is recomputed."""
        if self.end > now + tolerance:
            raise IntervalError(
                f"--end {self.end.isoformat()} is in the future (now {now.isoformat()}, "
                f"tolerance {int(tolerance.total_seconds())} s): a batch run makes its "
                "interval final, so it only runs over time that has passed"
            )

    def version_key(self, table_id: str, delta_version: int) -> str:
        """The rows' version: the same interval over the same input (table and table
        version) gets the same key, so a rerun rewrites identical rows instead of piling
        up copies. Eight hex digits of the table's UUID tell a recreated table apart."""
        fmt = "%Y%m%dT%H%MZ"
        start, end = self.recompute_start.strftime(fmt), self.end.strftime(fmt)
        return f"d{delta_version}-{table_id.replace('-', '')[:8]}-{start}-{end}"
