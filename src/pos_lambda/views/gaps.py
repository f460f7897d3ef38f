"""Gaps in a fiscal device's receipt numbers: the shared logic of the "did we get every
receipt?" view (issue 77), pure Python for both layers and the auditor.

A fiscal device numbers its receipts consecutively (`transaction_id` per
`vendor_fiscal_module`). Over one store-day, the numbers a layer holds for a device are a
set; a hole between two of them is a receipt issued but not (yet) received.

Devices are replaced and restarted, and the numbers alone cannot always tell a restart
from a loss, so the rule is explicit:

- **A restart** is a number below every number of the current run, taken in time
  (`happened_at`) order: the device began again (a new fiscal module, a reset counter).
  The day's numbers then split into *runs*, and each run has its own first and last
  number; the space between two runs is no gap.
- **A jump** forward by more than `max_jump` numbers is also a new run: a renumbered
  device, not thousands of receipts lost. Up to `max_jump`, a jump is a gap. Where the
  two cannot be told apart, `max_jump` is the setting that decides.

Within a run the view is a set, so the answer does not depend on arrival order: a late
receipt that fills a gap closes it, and a copy changes nothing (`runs` is a function of
the set of (happened_at, number) pairs, its input in any order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

Range = tuple[int, int]  # inclusive: (first, last)


@dataclass(frozen=True)
class Run:
    """Consecutively numbered receipts of one device, between restarts or big jumps."""

    first: int
    last: int
    count: int  # distinct numbers held
    missing: tuple[Range, ...]  # the holes between first and last, in order

    @property
    def missing_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.missing)


def ranges(numbers: Iterable[int]) -> tuple[Range, ...]:
    """The distinct numbers as sorted, disjoint, non-adjacent inclusive ranges."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return tuple((lo, hi) for lo, hi in out)


def holes(present: tuple[Range, ...]) -> tuple[Range, ...]:
    """The ranges between consecutive present ranges."""
    return tuple((a[1] + 1, b[0] - 1) for a, b in pairwise(present))


def runs(receipts: Iterable[tuple[datetime, int]], max_jump: int) -> list[Run]:
    """A device's runs over one day, from its receipts' (happened_at, number) pairs (in
    any order, copies included). Taken in time order, a number starts a new run when it
    is below every number of the current run (a restart) or above its highest by more
    than `max_jump` (a renumbering); any other number belongs to the current run, also
    one that fills a hole in it."""
    if max_jump < 1:
        raise ValueError(f"max_jump must be at least 1, got {max_jump}")
    groups: list[set[int]] = []
    low = high = 0
    for _, number in sorted(set(receipts)):
        if groups and low <= number <= high + max_jump:
            groups[-1].add(number)
            high = max(high, number)
        else:
            groups.append({number})
            low = high = number
    out = []
    for numbers in groups:
        present = ranges(numbers)
        out.append(Run(present[0][0], present[-1][1], len(numbers), holes(present)))
    return out


@dataclass(frozen=True)
class DeviceDay:
    """One device's day in the gaps view: what both layers store or answer per device.

    first/last: the day's first run's first number and its last run's last number;
    restarts: the first number of every run after the first (empty: one run)."""

    first: int
    last: int
    count: int
    missing: tuple[Range, ...]
    restarts: tuple[int, ...]

    @property
    def missing_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.missing)


def device_day(receipts: Iterable[tuple[datetime, int]], max_jump: int) -> DeviceDay:
    """The day of one device from its receipts' (happened_at, number) pairs (copies and
    any order allowed; at least one receipt)."""
    day_runs = runs(receipts, max_jump)
    if not day_runs:
        raise ValueError("a device's day needs at least one receipt")
    return DeviceDay(
        first=day_runs[0].first,
        last=day_runs[-1].last,
        count=sum(r.count for r in day_runs),
        missing=tuple(m for r in day_runs for m in r.missing),
        restarts=tuple(r.first for r in day_runs[1:]),
    )


def range_text(span: Range) -> str:
    """'1041-1042', or '1041' for a single number: how the view stores and prints a range."""
    lo, hi = span
    return str(lo) if lo == hi else f"{lo}-{hi}"


def parse_range(text: str) -> Range:
    """The inverse of `range_text`."""
    lo, sep, hi = text.partition("-")
    return (int(lo), int(hi)) if sep else (int(lo), int(lo))
