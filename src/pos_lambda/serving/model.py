"""Plain rows the serving layer works with: what the views hold and what it answers.

All instants are timezone-aware UTC; money is Decimal. The Cassandra adapter
(`pos_lambda.serving.views`) turns driver rows into these, so the merge and everything above it
are pure functions over plain values, tested with literal rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.schemas.contract import LineItem
from pos_lambda.views.windows import WINDOW

Source = Literal["batch", "speed"]


@dataclass(frozen=True)
class AggregateRow:
    """One stored 15-minute aggregate of a store, a row of agg_15m_batch or agg_15m_speed:
    its key, its measures and, for batch rows only, the version that wrote it."""

    operation_id: int
    window_start: datetime
    aggregate: Aggregate
    version: str | None = None


@dataclass(frozen=True)
class DayVersion:
    """The pointer's row for one UTC day: its committed version, final up to covered_until.

    `version` names the day's aggregates. Its receipts live in the generation's
    partition and show once the table version that archived them (`master_version`) is
    at most `delta_version` (src/pos_lambda/batch_layer/fold.py: each receipt is written once); a
    pointer of an older release has no generation, and its day's receipts are the
    version's own.
    """

    day: date
    version: str
    covered_until: datetime
    generation: str | None = None
    delta_version: int | None = None

    @property
    def receipts_ref(self) -> str:
        """Where the day's served receipts are, as one opaque text (it rides in page
        tokens): `receipts_partition(ref)` reads it back."""
        if self.generation is None or self.delta_version is None:
            return self.version
        return f"{self.generation}{_REF_SEPARATOR}{self.delta_version}"


_REF_SEPARATOR = "@"


def receipts_partition(ref: str) -> tuple[str, int | None]:
    """(receipts_batch version, highest master_version served) of a `receipts_ref`."""
    version, _, bound = ref.partition(_REF_SEPARATOR)
    return version, (int(bound) if bound else None)


@dataclass(frozen=True)
class Pointer:
    """The committed batch views: the static horizon and the days a reader needs."""

    horizon: datetime | None
    days: Mapping[date, DayVersion] = field(default_factory=dict)

    def covering(self, window_start: datetime) -> DayVersion | None:
        """The committed day version that answers this window, or None (speed answers).

        A window is the batch's iff its day has a committed version and the window ends
        at or before both that version's covered_until and the horizon: a window the
        batch covered only in part would be half final, so it stays with the speed view.
        """
        if self.horizon is None:
            return None
        version = self.days.get(window_start.date())
        end = window_start + WINDOW
        if version is None or end > version.covered_until or end > self.horizon:
            return None
        return version


@dataclass(frozen=True)
class Window:
    """One 15-minute window of the merged answer, with its provenance."""

    operation_id: int
    window_start: datetime
    window_end: datetime
    receipt_count: int
    item_quantity: int
    revenue: Decimal
    late_count: int
    source: Source
    final: bool  # true for batch rows: exact as of the committed version
    version: str | None  # the batch version that answered; None for speed


@dataclass(frozen=True)
class Totals:
    receipt_count: int = 0
    item_quantity: int = 0
    revenue: Decimal = Decimal("0.00")
    late_count: int = 0
    batch_windows: int = 0
    speed_windows: int = 0

    @property
    def final(self) -> bool:
        """Every window came from the batch: exact as of its committed versions."""
        return self.speed_windows == 0

    def of_day(self) -> dict[str, Any]:
        """What a day's total (`DayTotal`, `local_days.LocalDayTotal`) says beyond which
        day it is: these sums and whether they are final. Flat fields, not a nested
        Totals, because the HTTP and JSON answers list them flat."""
        return {**asdict(self), "final": self.final}


@dataclass(frozen=True)
class WindowsAnswer:
    """A store's 15-minute windows of [start, end), every one exactly once."""

    operation_id: int
    start: datetime
    end: datetime
    horizon: datetime | None
    totals: Totals
    windows: list[Window]


# Its fields beyond the day are `Totals.of_day()`'s (the docstring is the OpenAPI
# description: it stays as the HTTP API published it).
@dataclass(frozen=True)
class DayTotal:
    """A store's (or a ranked store's) day; final when every window came from batch."""

    operation_id: int
    day: date
    receipt_count: int
    item_quantity: int
    revenue: Decimal
    late_count: int
    batch_windows: int
    speed_windows: int
    final: bool


@dataclass(frozen=True)
class TopStores:
    day: date
    horizon: datetime | None
    stores: list[DayTotal]


# A receipt as served: one view's row of it, with its provenance and where its winning
# copy is in Kafka. Not the contract's `Receipt` (the message): the store is the page's
# and the totals are the row's. It keeps the name `Receipt` because the HTTP API's
# OpenAPI document names it so; no docstring, which would become its description there.
@dataclass(frozen=True)
class Receipt:
    happened_at: datetime
    vendor_fiscal_module: int
    transaction_id: int
    item_quantity: int
    revenue: Decimal
    late: bool
    line_items: list[LineItem]
    kafka_partition: int
    kafka_offset: int
    source: Source
    final: bool


@dataclass(frozen=True)
class ReceiptPage:
    """A page of a day's receipts: a UTC day (time_zone "UTC") or a store-local day (the
    store's registered zone), which is the UTC range [start, end)."""

    operation_id: int
    day: date
    receipts: list[Receipt]
    next_page: str | None  # pass back as `page` for the next rows; None: no more
    time_zone: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Segment:
    """One piece of a receipt listing, read from exactly one side: the rows of UTC day
    `day`'s partition with happened_at in [start, end), from the batch version `ref`
    (a `DayVersion.receipts_ref`) or from the speed view."""

    source: Source
    day: date
    start: datetime
    end: datetime
    ref: str | None = None


@dataclass(frozen=True)
class Conflict:
    """A copy of a receipt that differs from its winner, both versions side by side."""

    vendor_fiscal_module: int
    transaction_id: int
    differs: list[str]
    happened_at: datetime
    winner_happened_at: datetime
    revenue: Decimal
    # None while unknown: the speed layer's row of a conflict with a winner beyond its
    # lateness bound (no raw row to read it from) until the batch layer rewrites it.
    winner_revenue: Decimal | None
    kafka_partition: int
    kafka_offset: int
    winner_kafka_partition: int
    winner_kafka_offset: int


@dataclass(frozen=True)
class Fix:
    """What the batch changed in one window of the speed view (`pos-batch quality`)."""

    window_start: datetime
    version: str
    batch_receipts: int
    speed_receipts: int
    receipts_fixed: int
    batch_revenue: Decimal
    speed_revenue: Decimal
    revenue_fixed: Decimal
    duplicates: int
    conflicts: int
    beyond_speed_bound: int
    checked_at: datetime | None


@dataclass(frozen=True)
class StoreDay:
    """Conflicts (by their winner's time) and batch fixes (by window) of a store's UTC
    day or local day: the UTC range [start, end). Paged by its conflicts: the fixes
    (at most one per window) come whole with the first page, later pages have none."""

    operation_id: int
    day: date
    conflicts: list[Conflict]
    fixes: list[Fix]
    time_zone: str
    start: datetime
    end: datetime
    next_page: str | None = None  # pass back as `page` for more conflicts; None: no more


@dataclass(frozen=True)
class SpeedQuery:
    query_name: str
    batch_id: int
    finished_at: datetime | None
    age_seconds: float | None
    kafka_lag: int | None
    input_rows: int | None
    processed_rows_per_second: float | None


@dataclass(frozen=True)
class DeadLetters:
    total: int
    by_reason: dict[str, int]
    truncated: bool  # the scan stopped at POS_SERVE_DEAD_LETTER_SCAN_LIMIT rows


@dataclass(frozen=True)
class Health:
    checked_at: datetime
    horizon: datetime | None
    horizon_age_seconds: float | None  # how far event time has moved past the horizon
    batch_runs: list[BatchRun]  # the rows of `batch_runs` (pos_lambda.batch_layer.runs)
    speed: list[SpeedQuery]
    dead_letters: DeadLetters
