"""The 15-minute window: its length and the window an instant falls in (pure Python).

The one definition every Python reader of the views uses (serving, producer ledger,
batch intervals, audit). Spark needs the same bucket as a column expression: it is
`pos_lambda.views.aggregation.window_start`, built from `WINDOW_MICROS` below, and
tests/unit/views/test_windows.py runs both over the same edge instants.

Windows are aligned to UTC epoch quarters (hh:00, :15, :30, :45 UTC): [s, s + WINDOW)
with s a whole multiple of WINDOW since 1970-01-01T00:00Z, also before 1970 (the bucket
floors, it does not truncate toward the epoch).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

WINDOW = timedelta(minutes=15)
WINDOW_MICROS = WINDOW // timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def window_start(at: datetime) -> datetime:
    """Start (UTC) of the 15-minute window holding the instant `at`, whatever its offset."""
    if at.tzinfo is None or at.utcoffset() is None:
        # A naive datetime is no instant: guessing its zone would shift its window.
        raise ValueError(f"window_start needs a timezone-aware datetime, got {at!r}")
    # timedelta's % floors (the result has the sign of WINDOW): exact before 1970 too.
    return (at - (at - EPOCH) % WINDOW).astimezone(UTC)


def is_window_start(at: datetime) -> bool:
    """Whether `at` (timezone-aware) is a window boundary."""
    return window_start(at) == at
