"""What every view must hold, computed from the producer's ledger alone (pure).

Nothing here reads a view or imports the pipeline's logic (only the schemas' plain
types, such as `Aggregate`): the expectations come from
the ledger's lines (written by the simulator with Python Decimal) and from the
documented rules (the contract's 15-minute windows, the speed layer's lateness bound,
the alert thresholds, the malformed kind -> dead-letter reason table below).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from pos_lambda.schemas.aggregate import NO_RECEIPTS, Aggregate
from pos_lambda.schemas.contract import NaturalKey

WindowKey = tuple[int, datetime]  # (operation_id, window_start UTC)

# The simulator's malformed kinds (src/pos_lambda/producer/malformed.py) and the reason codes the
# contract's validator gives them (src/pos_lambda/schemas/contract.py REASONS; the dead letter's
# `reason` is the code, for some kinds followed by ":field.path"). One message, one
# dead letter: counts match one to one. A unit test feeds each kind through the
# validator to keep this table honest.
MALFORMED_REASONS: Mapping[str, frozenset[str]] = {
    "broken_json": frozenset({"invalid_json"}),  # truncated JSON
    "missing_field": frozenset({"missing_field"}),  # :happened_at, :operation_id, ...
    "wrong_type": frozenset({"wrong_type"}),  # :operation_id, :transactions.0.price, ...
    "negative_price": frozenset({"negative_price"}),
    "oversized_list": frozenset({"too_many_items"}),  # one line item over the limit
}


def reason_code(reason: str) -> str:
    """ "wrong_type:operation_id" -> "wrong_type" (the contract's codes carry a path)."""
    return reason.split(":", 1)[0]


@dataclass(frozen=True)
class ReceiptFact:
    """One unique receipt as the ledger describes it."""

    key: NaturalKey
    happened_at: datetime  # UTC
    window_start: datetime  # UTC
    item_quantity: int
    revenue: Decimal
    line_count: int
    late: bool
    first_sent_at: datetime  # UTC: Kafka record timestamp of its first copy
    returned_value: Decimal | None  # None in ledgers written before it was recorded

    @property
    def day(self) -> date:
        return self.happened_at.date()

    @property
    def store(self) -> int:
        return self.key[0]

    def beyond(self, bound: timedelta) -> bool:
        """Reached Kafka more than `bound` after it happened: the speed views leave it
        to the batch layer (views/records.py beyond_bound, POS_SPEED_MAX_LATENESS_HOURS)."""
        return self.first_sent_at - self.happened_at > bound

    def row(self) -> RawRow:
        return RawRow(
            self.happened_at, self.item_quantity, self.revenue, self.late, self.line_count
        )

    def index_row(self, bound: timedelta) -> IndexRow:
        return IndexRow(self.happened_at, self.late, self.beyond(bound))

    def topic_row(self) -> TopicRow:
        return TopicRow(self.happened_at, self.item_quantity, self.revenue, self.line_count)


class IndexRow(NamedTuple):
    """What the speed layer's natural-key index (receipt_keys) stores of one receipt:
    what the winner rule reads, not its content."""

    happened_at: datetime
    late: bool
    beyond_bound: bool


class RawRow(NamedTuple):
    """What a raw receipt view stores of one receipt (compared field by field)."""

    happened_at: datetime
    item_quantity: int
    revenue: Decimal
    late: bool
    line_count: int


class TopicRow(NamedTuple):
    """What a record of the deduplicated topic (`pos.receipts`) says of its receipt: the
    content of the message it carries (the winner's, as sent)."""

    happened_at: datetime
    item_quantity: int
    revenue: Decimal
    line_count: int


@dataclass(frozen=True)
class MalformedFact:
    """One malformed message the producer injected."""

    kind: str
    expected_reason: str | None
    value_sha256: str | None  # None in ledgers written before it was recorded

    @property
    def codes(self) -> frozenset[str]:
        if self.expected_reason:
            return frozenset({reason_code(self.expected_reason)})
        return MALFORMED_REASONS.get(self.kind, frozenset())


@dataclass(frozen=True)
class Ledger:
    receipts: dict[NaturalKey, ReceiptFact]  # in ledger (issue) order
    malformed: list[MalformedFact]
    conflicts: Counter[NaturalKey]  # conflicting copies injected (pos-demo adds them)
    summary: dict[str, Any]

    @property
    def store_days(self) -> list[tuple[int, date]]:
        return sorted({(r.store, r.day) for r in self.receipts.values()})

    @property
    def stores(self) -> list[int]:
        return sorted({r.store for r in self.receipts.values()})


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def fact(line: Mapping[str, Any]) -> ReceiptFact:
    returned = line.get("returned_value")
    return ReceiptFact(
        key=(int(line["operation_id"]), int(line["vendor_fiscal_module"]),
             int(line["transaction_id"])),
        happened_at=_utc(line["happened_at"]),
        window_start=_utc(line["window_start"]),
        item_quantity=int(line["item_quantity"]),
        revenue=Decimal(line["revenue"]),
        line_count=int(line["line_count"]),
        late=bool(line["late"]),
        first_sent_at=_utc(line["first_sent_at"]),
        returned_value=Decimal(returned) if returned is not None else None,
    )  # fmt: skip


def ledger_from(
    receipt_lines: Iterable[Mapping[str, Any]],
    fault_lines: Iterable[Mapping[str, Any]],
    summary: dict[str, Any],
) -> Ledger:
    receipts = {f.key: f for f in map(fact, receipt_lines)}
    malformed, conflicts = [], Counter[NaturalKey]()
    for f in fault_lines:
        if f.get("kind") == "malformed":
            kind = str(f.get("malformed_kind", ""))
            malformed.append(MalformedFact(kind, f.get("expected_reason"), f.get("value_sha256")))
        elif (
            f.get("kind") == "conflict"
        ):  # dev/src/pos_lambda_dev/demo/conflicts.py: same key, other content
            conflicts[(int(f["operation_id"]), int(f["vendor_fiscal_module"]),
                       int(f["transaction_id"]))] += 1  # fmt: skip
    return Ledger(receipts, malformed, conflicts, summary)


def load(path: str | Path) -> Ledger:
    """Read a ledger directory (receipts.jsonl, faults.jsonl, summary.json)."""
    import json

    path = Path(path)
    with open(path / "receipts.jsonl") as r, open(path / "faults.jsonl") as f:
        return ledger_from(
            (json.loads(line) for line in r if line.strip()),
            [json.loads(line) for line in f if line.strip()],
            json.loads((path / "summary.json").read_text()),
        )


def aggregates(receipts: Iterable[ReceiptFact]) -> dict[WindowKey, Aggregate]:
    """Sum per store and window: each unique receipt once (resends are not receipts)."""
    acc: dict[WindowKey, Aggregate] = {}
    for r in receipts:
        key = (r.store, r.window_start)
        acc[key] = acc.get(key, NO_RECEIPTS).plus_receipt(r.item_quantity, r.revenue, r.late)
    return acc


# --- alerts -----------------------------------------------------------------------

AlertIdentity = tuple[str, int, int, int]  # rule + natural key of the triggering receipt


@dataclass(frozen=True)
class StoreWeek:
    """One store's hours as the ledger records them: its IANA zone and, per weekday
    (Monday first), [opens, closes) in minutes after local midnight, or None (closed)."""

    time_zone: str
    week: tuple[tuple[int, int] | None, ...]


DeviceDayKey = tuple[int, date, int]  # (operation_id, UTC day, vendor_fiscal_module)
# first number, last number, receipts, missing ranges ('1041-1042' or '1041'), revenue
DeviceDayRow = tuple[int, int, int, tuple[str, ...], Decimal]


def device_days(receipts: Iterable[ReceiptFact]) -> dict[DeviceDayKey, DeviceDayRow]:
    """The gaps view the ledger implies, computed here: the simulator numbers each
    device's receipts consecutively and never restarts one, so a device's day is one
    run, and every hole between two of its numbers in `receipts` is missing from them."""
    numbers: dict[DeviceDayKey, set[int]] = {}
    revenue: dict[DeviceDayKey, Decimal] = {}
    for f in receipts:
        key = (f.store, f.day, f.key[1])
        numbers.setdefault(key, set()).add(f.key[2])
        revenue[key] = revenue.get(key, Decimal("0.00")) + f.revenue
    out = {}
    for key, found in numbers.items():
        ns = sorted(found)
        missing = tuple(
            str(a + 1) if b - a == 2 else f"{a + 1}-{b - 1}"
            for a, b in itertools.pairwise(ns)
            if b - a > 1
        )
        out[key] = (ns[0], ns[-1], len(ns), missing, revenue[key])
    return out


WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _minute_of_day(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def store_week(time_zone: str, opening_hours: Mapping[str, str]) -> StoreWeek:
    """From the ledger's text form: {"mon": "07:00-21:00", "sun": "closed", ...}."""
    week: list[tuple[int, int] | None] = []
    for day in WEEKDAY_NAMES:
        text = opening_hours.get(day, "closed")
        if text == "closed":
            week.append(None)
            continue
        opens, closes = text.split("-")
        week.append((_minute_of_day(opens), _minute_of_day(closes)))
    return StoreWeek(time_zone, tuple(week))


def ledger_store_weeks(summary: Mapping[str, Any]) -> dict[int, StoreWeek]:
    """The stores' hours the run used, as the producer recorded them (summary
    "store_hours": what the `stores` table held for the simulated stores when the stream
    was sent); empty for a ledger without (every store then has the default window)."""
    recorded = summary.get("store_hours") or {}
    return {
        int(op): store_week(str(s["time_zone"]), s["opening_hours"]) for op, s in recorded.items()
    }


@dataclass(frozen=True)
class AlertRules:
    """The thresholds the alerts processor runs with (POS_ALERTS_* settings) and the
    store hours (the ledger's; a store without: the default window, UTC)."""

    high_value: Decimal
    large_return: Decimal
    silence: timedelta
    opens: time  # UTC: the default window
    closes: time  # UTC
    stores: Mapping[int, StoreWeek] = field(default_factory=dict)

    def week_of(self, operation_id: int) -> StoreWeek:
        own = self.stores.get(operation_id)
        if own is not None:
            return own
        default = (self.opens.hour * 60 + self.opens.minute,
                   self.closes.hour * 60 + self.closes.minute)  # fmt: skip
        return StoreWeek("UTC", (default,) * 7)


def store_time(start: datetime, end: datetime, store: StoreWeek) -> timedelta:
    """Time of [start, end) in the store's hours, one UTC minute at a time (slow and
    plainly right; the pipeline computes it otherwise, in pos_lambda.stores.store_time).

    Every zone's offset and every DST change is a whole number of minutes, so within a
    UTC minute the local wall-clock minute is one: look it up at the piece's start. The
    first piece runs to the next whole minute, so boundaries are exact to the second.
    """
    zone = ZoneInfo(store.time_zone)
    total, at = timedelta(0), start.astimezone(UTC)
    end = end.astimezone(UTC)
    while at < end:
        next_minute = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
        piece = min(next_minute, end) - at
        local = at.astimezone(zone)
        hours = store.week[local.weekday()]
        if hours is not None and hours[0] <= local.hour * 60 + local.minute < hours[1]:
            total += piece
        at += piece
    return total


def expected_alerts(ledger: Ledger, rules: AlertRules) -> tuple[Counter[AlertIdentity], bool]:
    """Each alert the ledger implies, once; and whether large_return could be checked
    (older ledgers lack returned_value).

    From the rules' definitions (docs/alerts.md, alerts/rules.py docstring), applied to ledger
    values, never by the processor's code: high_value: revenue > threshold;
    large_return: returned value > threshold; device_silent: a device's receipt
    happened more than `silence` of store hours (the store's own, by its local wall
    clock, from the ledger; else the default UTC window) after the latest receipt of
    that device Kafka got before it (a device's receipts share a partition; Kafka got them in
    first-send order, ties in issue order, which is ledger order). Resends never alert;
    conflict: one per conflicting copy the ledger records (fault kind "conflict", each
    with its own content, sent after the original; the simulator itself sends none).
    """
    out: Counter[AlertIdentity] = Counter()
    for key, n in ledger.conflicts.items():
        out[("conflict", *key)] += n
    checked_returns = all(r.returned_value is not None for r in ledger.receipts.values())
    for key, r in ledger.receipts.items():
        if r.revenue > rules.high_value:
            out[("high_value", *key)] += 1
        if r.returned_value is not None and r.returned_value > rules.large_return:
            out[("large_return", *key)] += 1
    by_device: dict[tuple[int, int], list[tuple[datetime, int, ReceiptFact]]] = {}
    for index, r in enumerate(ledger.receipts.values()):
        by_device.setdefault(r.key[:2], []).append((r.first_sent_at, index, r))
    for sends in by_device.values():
        latest: datetime | None = None
        for _, _, r in sorted(sends, key=lambda s: (s[0], s[1])):
            at = r.happened_at
            if (
                latest is not None
                and at - latest > rules.silence  # else no store time can exceed it
                and store_time(latest, at, rules.week_of(r.store)) > rules.silence
            ):
                out[("device_silent", *r.key)] += 1
            latest = at if latest is None else max(latest, at)
    return out, checked_returns
