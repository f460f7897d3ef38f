"""What the serving layer reads of the views (the port `Serving` takes).

`pos_lambda.serving.views.Views` is the adapter: Cassandra's reads, mapped to the plain
rows of `pos_lambda.serving.model`. Unit tests hand `Serving` the same adapter over
tables in memory built from the keyspace's DDL (tests/support/memory_views.py), so the
statements, the mapping and the merge they feed are the ones production runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Protocol

from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.serving.gaps import BatchDeviceGaps, SpeedNumber
from pos_lambda.serving.model import (
    AggregateRow,
    Conflict,
    Fix,
    Pointer,
    Receipt,
    Segment,
    SpeedQuery,
)
from pos_lambda.serving.receipt_status import ReceiptViews


class ServingViews(ReceiptViews, Protocol):
    """The reads behind every `Serving` question, each of one kind of view row."""

    def pointer(self, first: date, last: date) -> Pointer:
        """The batch horizon and the committed version of each UTC day first..last."""
        ...

    def store_days(
        self, store: int, days: Sequence[date], pointer: Pointer
    ) -> tuple[list[AggregateRow], list[AggregateRow]]:
        """(batch rows of the committed versions, speed rows) of a store's UTC days."""
        ...

    def all_stores_day(
        self, day: date, pointer: Pointer
    ) -> tuple[list[AggregateRow], list[AggregateRow]]:
        """(batch, speed) rows of every store on UTC day `day`."""
        ...

    def store_known(self, store: int) -> bool:
        """Whether any aggregate view has ever held the store."""
        ...

    def receipts(
        self, store: int, segment: Segment, fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Receipt], bytes | None]:
        """One page of a store's receipts in one segment of a listing, and the state of
        the next page (None: the segment is done)."""
        ...

    def conflicts(self, store: int, day: date) -> list[Conflict]:
        """The conflicting copies of a store's UTC day that the served views count."""
        ...

    def conflicts_page(
        self, store: int, segment: Segment, fetch_size: int, paging_state: bytes | None
    ) -> tuple[list[Conflict], bytes | None]:
        """One page of a store's conflicts whose winner happened in one segment of the
        issues listing (from the segment's side), and the state of the next page (None:
        the segment is done)."""
        ...

    def gaps(
        self, store: int, day: date, version: str | None
    ) -> tuple[list[BatchDeviceGaps], list[SpeedNumber]]:
        """(the batch gaps rows of the day's served `version`, none when None; the speed
        view's receipt numbers) of a store's UTC day."""
        ...

    def fixes(self, store: int, day: date) -> list[Fix]:
        """What the batch fixed in a store's windows of UTC day `day`."""
        ...

    def batch_runs(self, limit: int) -> list[BatchRun]:
        """The last `limit` batch runs, newest first."""
        ...

    def speed_progress(self, now: datetime) -> list[SpeedQuery]:
        """The speed queries' last micro-batches, their age taken at `now`."""
        ...

    def dead_letter_reasons(self, limit: int) -> tuple[list[str], bool]:
        """Reasons of the dead letters, at most `limit` (and whether that cut the scan)."""
        ...

    def close(self) -> None:
        """Release the connection, if any."""
        ...
