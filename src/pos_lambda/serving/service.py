"""The serving layer's Python API: one library behind the CLI, the HTTP API and the page.

    from pos_lambda.settings import load_settings
    from pos_lambda.serving import Serving

    with Serving(load_settings()) as serving:
        answer = serving.windows(101, start, end)    # 15-minute windows, merged
        serving.receipt_status(101, 7, 42).status    # "accepted", ..., "unknown"
        for w in answer.windows:
            print(w.window_start, w.receipt_count, w.revenue, w.source, w.final)
        local = serving.local_days(102, date(2026, 3, 2), date(2026, 3, 2))  # by store zone
        week = serving.hour_of_week(102, date(2026, 2, 2), date(2026, 3, 1))  # 7 x 24 cells
        serving.compare_week_before(102, date(2026, 3, 2)).revenue_change_percent

Each method validates its input (`QueryError`), reads what it needs through
the `serving.ports.ServingViews` port (`serving.views.Views`: Cassandra's reads, unless
another is given) and answers with the pure merge of `serving.merge`. A store no
view has ever held raises `UnknownStore`; Cassandra trouble raises `Unavailable`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from typing import TypeVar

from pos_lambda.schemas import contract
from pos_lambda.serving import gaps as gaps_answer
from pos_lambda.serving import local_week, merge, paging, receipt_status
from pos_lambda.serving.errors import UnknownStore
from pos_lambda.serving.local_days import LocalDays, local_day_totals, registered_store, utc_span
from pos_lambda.serving.local_week import DayComparison, HourOfWeek
from pos_lambda.serving.model import (
    DayTotal,
    DeadLetters,
    Health,
    ReceiptPage,
    Segment,
    StoreDay,
    TopStores,
    Window,
    WindowsAnswer,
)
from pos_lambda.serving.ports import ServingViews
from pos_lambda.serving.receipt_status import ReceiptKey, ReceiptStatus
from pos_lambda.serving.requests import (
    PageToken,
    TimeRange,
    check_day,
    check_device,
    check_limit,
    check_page_current,
    check_store,
    check_transaction,
    day_range,
    decode_page,
    encode_page,
)
from pos_lambda.serving.views import Views
from pos_lambda.settings import Settings
from pos_lambda.stores.model import Store
from pos_lambda.stores.registry import CassandraStores, StoreRegistry
from pos_lambda.views.windows import window_start

MAX_PAGE_SIZE = 1000
Row = TypeVar("Row")  # a listing's row: a receipt, a conflict
MAX_TOP = 1000
MAX_RUNS = 100


def _now() -> datetime:
    return datetime.now(UTC)


class Serving:
    """Queries over the merged views (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = _now,
        stores: StoreRegistry | None = None,
        views: ServingViews | None = None,
    ) -> None:
        self.settings = settings
        self.views = views or Views(settings)
        self.stores = stores or CassandraStores(settings, writes=False)
        self._clock = clock
        self._known: set[int] = set()  # stores never disappear from the views
        self._page_key: bytes | None = None  # read or made on the first paged request

    def page_key(self) -> bytes:
        if self._page_key is None:
            self._page_key = paging.page_key(self.settings)
        return self._page_key

    def close(self) -> None:
        self.views.close()
        self.stores.close()

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def require_store(self, store: int) -> None:
        check_store(store)
        if store in self._known:
            return
        if not self.views.store_known(store):
            raise UnknownStore(store)
        self._known.add(store)

    def windows(self, store: int, start: datetime, end: datetime) -> WindowsAnswer:
        """The store's 15-minute windows starting in [start, end), each exactly once."""
        span = TimeRange.checked(start, end, self.settings.serve.max_range_days)
        self.require_store(store)
        days = span.days
        pointer = self.views.pointer(days[0], days[-1])
        batch, speed = self.views.store_days(store, days, pointer)
        rows = merge.merge_windows(store, span.start, span.end, pointer, batch, speed)
        return WindowsAnswer(
            operation_id=store,
            start=window_start(span.start),
            end=span.end,
            horizon=pointer.horizon,
            totals=merge.totals(rows),
            windows=rows,
        )

    def daily_totals(self, store: int, first: date, last: date) -> list[DayTotal]:
        """The store's whole UTC days first..last (both included), merged."""
        span = day_range(first, last, self.settings.serve.max_range_days)
        return merge.daily_totals(self.windows(store, span.start, span.end).windows)

    def local_days(self, store: int, first: date, last: date) -> LocalDays:
        """The store's local business days first..last (both included), in the zone the
        store registry gives it: each day the exact sum of its UTC windows (96; 92 or 100
        on a DST day), merged as `windows` merges them."""
        registered, days, horizon, rows = self._local_windows(store, first, last)
        return LocalDays(
            operation_id=store,
            name=registered.name,
            time_zone=registered.time_zone,
            horizon=horizon,
            days=local_day_totals(registered, days, rows),
        )

    def store_entry(self, store: int) -> Store:
        """The store's registry entry (zone, hours); `UnregisteredStore` when it has none."""
        check_store(store)
        return registered_store(self.stores, store)

    def hour_of_week(self, store: int, first: date, last: date) -> HourOfWeek:
        """The store's local days first..last summed per local weekday and hour (7 x 24
        cells), from the same merged windows as `local_days`."""
        registered, days, horizon, rows = self._local_windows(store, first, last)
        return local_week.hour_of_week(registered, days, rows, horizon)

    def compare_week_before(
        self, store: int, day: date, until: time | None = None
    ) -> DayComparison:
        """The store's local day against the same weekday a week before it; with
        `until` (a local time, `local_days.parse_until`), both days up to that time."""
        check_day(day)
        earlier = local_week.week_before(day)
        check_day(earlier, "the week before's day")
        # Two reads of one local day each: the six days between are not needed.
        registered, _, _, before_rows = self._local_windows(store, earlier, earlier)
        _, _, horizon, rows = self._local_windows(store, day, day)
        [now] = local_day_totals(registered, [day], rows, until)
        [then] = local_day_totals(registered, [earlier], before_rows, until)
        return local_week.compare(registered, now, then, horizon, until)

    def _local_windows(
        self, store: int, first: date, last: date
    ) -> tuple[Store, list[date], datetime | None, list[Window]]:
        """(registry entry, the local days, horizon, merged windows of all of them)."""
        check_store(store)
        span = day_range(first, last, self.settings.serve.max_range_days)  # days, checked
        registered = registered_store(self.stores, store)
        self.require_store(store)
        start, end = utc_span(registered, first, last)
        # Not TimeRange.checked: N local days may be N x 24 h + 1 h (a fall-back day).
        utc_days = TimeRange(start, end).days
        pointer = self.views.pointer(utc_days[0], utc_days[-1])
        batch, speed = self.views.store_days(store, utc_days, pointer)
        rows = merge.merge_windows(store, start, end, pointer, batch, speed)
        return registered, span.days, pointer.horizon, rows

    def top_stores(self, day: date, limit: int = 10) -> TopStores:
        """The day's stores by merged revenue, best first."""
        check_limit(limit, "limit", MAX_TOP)
        check_day(day)
        pointer = self.views.pointer(day, day)
        batch, speed = self.views.all_stores_day(day, pointer)
        return TopStores(day, pointer.horizon, merge.top_stores(day, pointer, batch, speed, limit))

    def receipts(
        self, store: int, day: date, page_size: int | None = None, page: str | None = None
    ) -> ReceiptPage:
        """A page of the store's receipts of UTC day `day` in time order; pass
        `next_page` back for more."""
        return self._receipt_page(store, day, False, page_size, page)

    def local_receipts(
        self, store: int, day: date, page_size: int | None = None, page: str | None = None
    ) -> ReceiptPage:
        """A page of the store's receipts of its local day `day` (in the zone the store
        registry gives it) in time order; pass `next_page` back for more."""
        return self._receipt_page(store, day, True, page_size, page)

    def _receipt_page(
        self, store: int, day: date, local: bool, page_size: int | None, page: str | None
    ) -> ReceiptPage:
        """Receipts of windows the batch answers come from the committed version's
        `receipts_batch`, the rest from the speed view's `receipts_by_store_day`, split
        at the same window boundary as the aggregates (`merge.receipt_segments`)."""
        size = check_limit(page_size or self.settings.serve.page_size, "page_size", MAX_PAGE_SIZE)
        token, _, now = self._listing(store, day, local, page, "receipts")
        # The day as the first page cut it, even if the store's zone was edited since.
        zone, start, end = token.zone or "UTC", token.segments[0].start, token.segments[-1].end
        out, following = self._page(token, size, now, self.views.receipts)
        return ReceiptPage(store, day, out, following, zone, start, end)

    def store_day(
        self, store: int, day: date, page_size: int | None = None, page: str | None = None
    ) -> StoreDay:
        """A page of the conflicting copies of the store's receipts of UTC day `day`
        (with the first page: what the batch fixed in its windows); pass `next_page`
        back for more."""
        return self._store_day(store, day, False, page_size, page)

    def local_store_day(
        self, store: int, day: date, page_size: int | None = None, page: str | None = None
    ) -> StoreDay:
        """The same for the store's local day `day`: conflicts whose winner happened in
        it, fixes of the windows that start in it."""
        return self._store_day(store, day, True, page_size, page)

    def _listing(
        self, store: int, day: date, local: bool, page: str | None, listing: str
    ) -> tuple[PageToken, list[date], datetime]:
        """A paged listing's token, and the UTC days a first page spans (none when
        resumed), and now. A first page checks the registry (a local day) before the
        views and cuts the listing's segments at each UTC day's batch seam; a resumed one
        is refused (410) when too old, or when a batch version it still has to read is
        no longer served (a rebuild, then gc, deletes it)."""
        check_day(day)
        check_store(store)
        token = decode_page(page, self.page_key(), store, day, local, listing) if page else None
        span = self._day_span(store, day, local) if token is None else None
        self.require_store(store)
        now = self._clock()
        if span is not None:
            zone, start, end = span
            utc_days = TimeRange(start, end).days
            pointer = self.views.pointer(utc_days[0], utc_days[-1])
            segments = tuple(merge.receipt_segments(pointer, start, end))
            zone_kept = zone if local else None
            return PageToken(segments, 0, None, store, day, zone_kept, now, listing), utc_days, now
        assert token is not None
        days = [g.day for g in token.segments[token.index :]]
        served = self.views.pointer(min(days), max(days))
        check_page_current(token, served, now, self.settings.serve.page_token_max_age_seconds)
        return token, [], now

    def _store_day(
        self, store: int, day: date, local: bool, page_size: int | None, page: str | None
    ) -> StoreDay:
        """Paged as the receipts are (`_receipt_page`): the listing's segments are cut
        at its first page, each UTC day's at its batch seam, so a conflict is listed by
        the side that counts its winner's window, as `merge.served_conflicts` decides:
        before the seam the served batch version's `conflicts_batch` rows, after it the
        speed layer's `conflicts`. A page answers at most `page_size` conflicts
        (POS_SERVE_PAGE_SIZE by default); the fixes (a row per window at most, <= 100 a
        UTC day) come whole with the first page only."""
        size = check_limit(page_size or self.settings.serve.page_size, "page_size", MAX_PAGE_SIZE)
        token, utc_days, now = self._listing(store, day, local, page, "issues")
        zone, start, end = token.zone or "UTC", token.segments[0].start, token.segments[-1].end
        fixes = []
        for utc_day in utc_days:
            fixes += self.views.fixes(store, utc_day)
        # The UTC days' partitions hold the day and its neighbours' ends.
        fixes = [f for f in fixes if start <= f.window_start < end]
        conflicts, following = self._page(token, size, now, self.views.conflicts_page)
        return StoreDay(store, day, conflicts, fixes, zone, start, end, following)

    def _page(
        self,
        token: PageToken,
        size: int,
        now: datetime,
        read: Callable[[int, Segment, int, bytes | None], tuple[list[Row], bytes | None]],
    ) -> tuple[list[Row], str | None]:
        """At most `size` rows of a listing from where `token` stands, read segment by
        segment with `read` (one Cassandra page each), and the token of the next page
        (None: the listing is done)."""
        out: list[Row] = []
        index, state = token.index, token.paging_state
        while index < len(token.segments) and len(out) < size:
            rows, state = read(token.store, token.segments[index], size - len(out), state)
            out += rows
            if state is None:  # this segment is done: go on with the next one
                index += 1
        following = (
            encode_page(
                replace(token, index=index, paging_state=state, issued_at=now), self.page_key()
            )
            if index < len(token.segments)
            else None
        )
        return out, following

    def _day_span(self, store: int, day: date, local: bool) -> tuple[str, datetime, datetime]:
        """(zone, start, end) of the store's UTC day or local day `day`."""
        if not local:
            return "UTC", *merge.day_bounds(day)
        registered = registered_store(self.stores, store)
        return registered.time_zone, *utc_span(registered, day, day)

    def gaps(self, store: int, day: date) -> gaps_answer.GapsAnswer:
        """Did we get every receipt of a store's UTC day? Each device's numbers, and the
        ranges missing from them (pos_lambda.serving.gaps: final from the batch layer once
        it covers the whole day, provisional from the speed view before)."""
        self.require_store(store)
        pointer = self.views.pointer(day, day)
        _, end = merge.day_bounds(day)
        served = pointer.days.get(day)
        final = (
            served is not None
            and pointer.horizon is not None
            and served.covered_until >= end
            and pointer.horizon >= end
        )
        batch, speed = self.views.gaps(store, day, served.version if final and served else None)
        if final and batch:
            return gaps_answer.from_batch(store, day, batch)
        basis: gaps_answer.Basis = "provisional"
        if final:
            # No rows under a final version: the store had no receipts that day, or the
            # version was committed before the gaps view existed.
            batch_rows, _ = self.views.store_days(store, [day], pointer)
            if not any(r.aggregate.receipt_count for r in batch_rows):
                return gaps_answer.GapsAnswer(store, day, "final")
            basis = "not yet backfilled"
        return gaps_answer.from_speed(
            store,
            day,
            speed,
            self.settings.speed.gap_max_jump,
            timedelta(hours=self.settings.speed.max_lateness_hours),
            self._clock(),
            basis,
        )

    def receipt_status(self, store: int, device: int, transaction: int) -> ReceiptStatus:
        """Did the pipeline get this receipt? accepted, resend absorbed, conflict, dead
        letter or unknown (pos_lambda.serving.receipt_status); `unknown` is an answer,
        not an error: a terminal resends on it."""
        key = ReceiptKey(check_store(store), check_device(device), check_transaction(transaction))
        return receipt_status.look_up(key, self.views)

    def health(self, runs: int = 5, dead_letter_rows: int | None = None) -> Health:
        """Batch horizon and its age, the last runs, speed progress, dead letters (by
        reason, over at most `dead_letter_rows` rows, and never more than
        POS_SERVE_DEAD_LETTER_SCAN_LIMIT)."""
        check_limit(runs, "runs", MAX_RUNS)
        scan = self.settings.serve.dead_letter_scan_limit
        if dead_letter_rows is not None:
            # The setting caps it: the dashboard's own bound never makes a page fail.
            scan = min(check_limit(dead_letter_rows, "dead_letter_rows", 2**31), scan)
        now = self._clock()
        today = now.date()
        pointer = self.views.pointer(today, today)
        reasons, truncated = self.views.dead_letter_reasons(scan)
        by_reason = Counter(contract.reason_code(r) for r in reasons)
        return Health(
            checked_at=now,
            horizon=pointer.horizon,
            horizon_age_seconds=(now - pointer.horizon).total_seconds()
            if pointer.horizon
            else None,
            batch_runs=self.views.batch_runs(runs),
            speed=self.views.speed_progress(now),
            dead_letters=DeadLetters(len(reasons), dict(by_reason.most_common()), truncated),
        )
