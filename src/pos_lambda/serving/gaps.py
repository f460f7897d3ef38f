"""Did we get every receipt? A store-day's gaps per device, as the serving layer answers
it (pure: the reads are the port's, `pos_lambda.serving.ports.ServingViews.gaps`).

Both layers answer with the one logic of `pos_lambda.views.gaps`:

- **final**: the batch layer covers the whole UTC day and its version holds the gaps
  view (`device_gaps_batch`, computed from the master dataset); a missing range is then
  missing for good: lost before Kafka.
- **provisional**: otherwise the speed view's receipts of the day (`receipts_raw`) go
  through the same logic here, on read. A missing range *may still arrive* while the
  speed layer's lateness bound (`POS_SPEED_MAX_LATENESS_HOURS`) has not passed since the
  receipt that follows it happened (a receipt issued between two others happened
  between them), and is *missing* after that.
- **not yet backfilled**: the day is final in the batch views, but its version was
  committed before this view existed (a deployment upgraded to it): the speed view's
  answer is given, provisional, until `pos-batch rebuild` backfills the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Literal

from pos_lambda.views.gaps import Range, device_day, range_text

Status = Literal["missing", "may still arrive"]
Basis = Literal["final", "provisional", "not yet backfilled"]


@dataclass(frozen=True)
class BatchDeviceGaps:
    """One `device_gaps_batch` row."""

    device: int
    first: int
    last: int
    receipts: int
    missing: tuple[Range, ...]
    restarts: tuple[int, ...]
    revenue: Decimal


@dataclass(frozen=True)
class SpeedNumber:
    """What the gaps read of one speed-view receipt."""

    device: int
    number: int
    happened_at: datetime
    revenue: Decimal


@dataclass(frozen=True)
class MissingRange:
    first: int
    last: int
    status: Status

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def text(self) -> str:
        return range_text((self.first, self.last))


@dataclass(frozen=True)
class DeviceGaps:
    device: int
    first: int
    last: int
    receipts: int
    missing: tuple[MissingRange, ...]
    restarts: tuple[int, ...] = ()
    revenue: Decimal = Decimal("0.00")  # the received receipts' sum

    @property
    def missing_count(self) -> int:
        return sum(m.count for m in self.missing)


@dataclass(frozen=True)
class GapsAnswer:
    store: int
    day: date
    basis: Basis
    devices: tuple[DeviceGaps, ...] = field(default_factory=tuple)

    @property
    def missing_count(self) -> int:
        return sum(d.missing_count for d in self.devices)

    def line(self) -> str:
        """'store 104 2026-03-02 (final): 2 missing (3311-3312 on till 2)'."""
        head = f"store {self.store} {self.day} ({self.basis})"
        if not self.devices:
            return f"{head}: no receipts"
        holes = [f"{m.text()} on till {d.device}" for d in self.devices for m in d.missing]
        if not holes:
            return f"{head}: complete, {sum(d.receipts for d in self.devices)} receipts"
        return f"{head}: {self.missing_count} missing ({', '.join(holes)})"


def from_batch(store: int, day: date, rows: Iterable[BatchDeviceGaps]) -> GapsAnswer:
    devices = tuple(
        DeviceGaps(
            r.device,
            r.first,
            r.last,
            r.receipts,
            tuple(MissingRange(lo, hi, "missing") for lo, hi in r.missing),
            r.restarts,
            r.revenue,
        )
        for r in sorted(rows, key=lambda r: r.device)
    )
    return GapsAnswer(store, day, "final", devices)


def from_speed(
    store: int,
    day: date,
    numbers: Sequence[SpeedNumber],
    max_jump: int,
    lateness: timedelta,
    now: datetime,
    basis: Basis = "provisional",
) -> GapsAnswer:
    """The speed view's answer: the shared logic per device, each missing range's status
    by the lateness bound from the receipt that follows it."""
    by_device: dict[int, list[SpeedNumber]] = {}
    for n in numbers:
        by_device.setdefault(n.device, []).append(n)
    devices = []
    for device in sorted(by_device):
        got = device_day(((n.happened_at, n.number) for n in by_device[device]), max_jump)
        at = {n.number: n.happened_at for n in by_device[device]}
        missing = tuple(
            MissingRange(lo, hi, "missing" if now >= at[hi + 1] + lateness else "may still arrive")
            for lo, hi in got.missing
        )
        revenue = sum((n.revenue for n in by_device[device]), Decimal("0.00"))
        devices.append(
            DeviceGaps(device, got.first, got.last, got.count, missing, got.restarts, revenue)
        )
    return GapsAnswer(store, day, basis, tuple(devices))
