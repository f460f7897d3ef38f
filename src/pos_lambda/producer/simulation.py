"""The POS simulator's pure core: receipts, fault injection and the ground truth.

`simulate(config)` returns the messages to send (in send order, each with its
Kafka key and record timestamp) and the ledger: every unique receipt with its
expected contribution and every injected fault. Nothing here touches Kafka or the
clock; the same config and seed give the same bytes. The CLI (`pos-producer
simulate`) is the usual way in; in Python:

    result = simulate(SimulationConfig(count=1000, seed=7, start=datetime(2026, 3, 2, tzinfo=UTC),
                                       faults=FaultConfig(resend_rate=0.006)))

Time model: a simulated clock advances by exponential gaps shaped by a daily
traffic curve (by UTC hour; with `store_hours`, by each store's local hour while it is
open, see below). A receipt *happens* at clock time plus its device's clock skew and
is normally *sent* (Kafka record timestamp) at clock time; a late receipt is sent
after a delay, so messages go out in send-time order and late ones arrive out of
order by event time.

Stores as data (`store_hours=True`, `pos-producer simulate --store-hours`): the stores
get IANA zones and opening hours from `catalog.STORE_CATALOG` (`result.stores`, which
the CLI writes to the `stores` table), print their local time with the zone's real
offset (+05:45, DST), receive traffic only while open by their local wall clock (the
clock jumps over hours when every store is closed) and the ledger records each
receipt's store-local day and, in its summary, each store's zone and hours
("store_hours": the CLI replaces it by what the `stores` table holds after seeding).
Off by default, so that a seed always gives the same stream, around the clock: the
chaos run's and the benchmarks' figures stay comparable from one release to the next.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import random
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any

from pos_lambda.producer import malformed
from pos_lambda.producer.catalog import HOURLY_TRAFFIC, ITEMS, STORE_CATALOG, STORE_UTC_OFFSETS
from pos_lambda.schemas.contract import LATE_THRESHOLD, LIMITS, LineItem, NaturalKey, Receipt
from pos_lambda.stores.model import Store, parse_week
from pos_lambda.views.windows import window_start

REALISTIC_RESEND_RATE = 0.006  # terminals retrying over flaky (GPRS) links
FAULT_KINDS = ("resend", "burst", "late", "out_of_order", "malformed", "lost_at_source")
_LATE_THRESHOLD_MS = int(LATE_THRESHOLD.total_seconds() * 1000)


@dataclass(frozen=True)
class FaultConfig:
    """Each knob off (0) by default. Rates are per unique receipt (bursts: per arrival)."""

    resend_rate: float = 0.0  # realistic: REALISTIC_RESEND_RATE
    burst_rate: float = 0.0  # a receipt starts a same-second burst in its store
    late_rate: float = 0.0
    late_max_delay_s: float = 6 * 3600.0
    out_of_order_rate: float = 0.0
    clock_skew_max_s: float = 0.0
    malformed_rate: float = 0.0
    # A receipt the till issued (and numbered) but never sent: a disk lost, an outage
    # longer than its buffer. The ledger records it as a fault, not as a receipt: no
    # view can hold it, and the gaps view shows its number missing.
    lost_at_source_rate: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_rate") and not 0.0 <= value <= 1.0:
                raise ValueError(f"{f.name} must be between 0 and 1, got {value}")
        if self.late_max_delay_s <= LATE_THRESHOLD.total_seconds():
            raise ValueError(
                f"late_max_delay_s must exceed the contract's LATE_THRESHOLD "
                f"({LATE_THRESHOLD.total_seconds():.0f} s), got {self.late_max_delay_s}"
            )
        if self.clock_skew_max_s < 0:
            raise ValueError(f"clock_skew_max_s must be >= 0, got {self.clock_skew_max_s}")


@dataclass(frozen=True)
class SimulationConfig:
    count: int  # unique valid receipts; resends and malformed messages come on top
    seed: int
    start: datetime  # simulated start, tz-aware
    stores: int = 20
    mean_gap_s: float = 2.0  # mean simulated seconds between receipts at peak traffic
    faults: FaultConfig = field(default_factory=FaultConfig)
    store_hours: bool = False  # stores as data: zones, opening hours (module docstring)

    def __post_init__(self) -> None:
        if self.count < 1 or self.stores < 1 or self.mean_gap_s <= 0:
            raise ValueError("count and stores must be >= 1 and mean_gap_s > 0")
        if self.start.utcoffset() is None:
            raise ValueError(f"start must be timezone-aware, got {self.start!r}")


@dataclass(frozen=True)
class OutgoingMessage:
    key: bytes | None
    value: bytes
    timestamp_ms: int  # Kafka record timestamp (CreateTime); 0 lets the client stamp it
    kind: str  # "receipt", "resend", "malformed:<kind>" or "replay"


@dataclass(frozen=True)
class Device:
    operation_id: int
    vendor_fiscal_module: int
    skew_s: int
    utc_offset_h: int  # the fixed offset it prints without store_hours
    store: Store | None = None  # with store_hours: its zone and hours

    @property
    def key(self) -> bytes:
        # One device's receipts share a key, hence a partition, hence an order.
        return f"{self.operation_id}:{self.vendor_fiscal_module}".encode()


@dataclass
class _Planned:
    receipt: Receipt
    device: Device
    send_ms: int
    value: bytes
    held: bool = False  # already delayed by a fault: not reordered again


@dataclass(frozen=True)
class SimulationResult:
    messages: list[OutgoingMessage]  # in send (timestamp) order
    receipts: list[dict[str, Any]]  # ledger lines, one per unique receipt
    faults: list[dict[str, Any]]  # ledger lines, one per injected fault
    summary: dict[str, Any]
    stores: list[Store] = field(default_factory=list)  # with store_hours: the registry


def catalog_stores(count: int) -> list[Store]:
    """The simulated stores 101, 102, ... as registry entries (catalog.STORE_CATALOG)."""
    out = []
    for i in range(count):
        name, zone, hours = STORE_CATALOG[i % len(STORE_CATALOG)]
        out.append(Store.create(101 + i, f"{name} #{101 + i}", zone, parse_week(hours)))
    return out


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _devices(
    rng: random.Random, stores: int, skew_max_s: float, registry: list[Store]
) -> list[list[Device]]:
    layout, next_vfm = [], 1001
    for i in range(stores):
        op, offset = 101 + i, STORE_UTC_OFFSETS[i % len(STORE_UTC_OFFSETS)]
        store = registry[i] if registry else None
        devs = []
        for _ in range(rng.randint(1, 4)):
            skew = round(rng.uniform(-skew_max_s, skew_max_s)) if skew_max_s else 0
            devs.append(Device(op, next_vfm, skew, offset, store))
            next_vfm += 1
        layout.append(devs)
    return layout


def _basket(rng: random.Random) -> tuple[LineItem, ...]:
    lines = []
    for title, price in rng.sample(ITEMS, rng.randint(1, 8)):
        amount = rng.randint(1, 3)
        if rng.random() < 0.03:  # a returned item
            amount = -amount
        lines.append(LineItem(title, price, amount))
    return tuple(lines)


def encode(receipt: Receipt, utc_offset_h: int = 0, zone: tzinfo | None = None) -> bytes:
    """The message bytes: compact JSON, happened_at in the store's local offset (the
    zone's, DST included, when given)."""
    doc = receipt.to_json()
    local = receipt.happened_at.astimezone(zone or timezone(timedelta(hours=utc_offset_h)))
    doc["happened_at"] = local.isoformat()
    return json.dumps(doc, separators=(",", ":")).encode()


def _key(r: Receipt) -> dict[str, int]:
    return {
        "operation_id": r.operation_id,
        "vendor_fiscal_module": r.vendor_fiscal_module,
        "transaction_id": r.transaction_id,
    }


def _issue_receipts(
    rng: random.Random, config: SimulationConfig, layout: list[list[Device]]
) -> tuple[list[_Planned], list[dict[str, Any]]]:
    """N receipts in issue order, with per-device increasing numbers; bursts as faults."""
    next_tid = {d.vendor_fiscal_module: rng.randint(1, 5000) for ds in layout for d in ds}
    planned: list[_Planned] = []
    faults: list[dict[str, Any]] = []
    clock = config.start.astimezone(UTC).replace(microsecond=0)

    def issue(device: Device, at: datetime) -> _Planned:
        tid = next_tid[device.vendor_fiscal_module]
        next_tid[device.vendor_fiscal_module] = tid + 1
        receipt = Receipt(
            happened_at=at + timedelta(seconds=device.skew_s),
            operation_id=device.operation_id,
            transaction_id=tid,
            vendor_fiscal_module=device.vendor_fiscal_module,
            line_items=_basket(rng),
        )
        zone = device.store.zone if device.store else None
        p = _Planned(receipt, device, _ms(at), encode(receipt, device.utc_offset_h, zone))
        planned.append(p)
        return p

    burst_rate = config.faults.burst_rate
    while len(planned) < config.count:
        if config.store_hours:
            found = _next_open_arrival(rng, config, layout, clock)
            if isinstance(found, datetime):  # nobody open then: go on from the next opening
                clock = found
                continue
            clock, store = found
        else:
            weight = HOURLY_TRAFFIC[clock.hour]
            clock += timedelta(seconds=round(rng.expovariate(weight / config.mean_gap_s)))
            store = rng.choice(layout)
        first = issue(rng.choice(store), clock)
        if burst_rate and rng.random() < burst_rate:
            extra = min(rng.randint(1, 3), config.count - len(planned))
            if not extra:  # N reached: no room for a burst
                continue
            burst = [first, *(issue(rng.choice(store), clock) for _ in range(extra))]
            faults.append(
                {
                    "kind": "burst",
                    "operation_id": first.device.operation_id,
                    "at": clock.isoformat(),
                    "receipts": len(burst),
                    "natural_keys": [list(p.receipt.natural_key) for p in burst],
                    "detail": f"{len(burst)} receipts of store {first.device.operation_id} "
                    "in one second",
                }
            )
    return planned, faults


def _lose_at_source(
    rng: random.Random, planned: list[_Planned], f: FaultConfig
) -> tuple[list[_Planned], list[dict[str, Any]]]:
    """The receipts that reach Kafka, and a fault per receipt lost before it (no draw at
    all with the knob off: other faults of a seed stay as they were)."""
    if not f.lost_at_source_rate:
        return planned, []
    kept: list[_Planned] = []
    faults: list[dict[str, Any]] = []
    for p in planned:
        if rng.random() >= f.lost_at_source_rate:
            kept.append(p)
            continue
        r = p.receipt
        faults.append(
            {
                "kind": "lost_at_source",
                "natural_key": list(r.natural_key),
                "happened_at": r.happened_at.astimezone(UTC).isoformat(),
                "detail": f"receipt {r.transaction_id} of till {r.vendor_fiscal_module} "
                f"(store {r.operation_id}) never left the till",
            }
        )
    return kept, faults


def _local_weight(store: Store, at: datetime) -> float:
    """A store's traffic at an instant: its local hour's share, 0 while it is closed."""
    local = at.astimezone(store.zone)  # once: this runs for every store at every arrival
    hours = store.hours[local.weekday()]
    if hours is None or not hours.contains(local.hour * 60 + local.minute):
        return 0.0
    return HOURLY_TRAFFIC[local.hour]


def _next_open_arrival(
    rng: random.Random, config: SimulationConfig, layout: list[list[Device]], clock: datetime
) -> tuple[datetime, list[Device]] | datetime:
    """The next arrival (instant, store) when stores follow their local hours, or the
    instant to go on from when no store is open (the next opening of any store).

    Every store is a stream of its own, shaped by its local hour; their sum arrives with
    the summed rate, each arrival at a store drawn by its share. `mean_gap_s` stays the
    gap at peak with every store open, as without store hours.
    """
    stores = [ds[0].store for ds in layout if ds[0].store is not None]
    assert len(stores) == len(layout), "store_hours: every store has a registry entry"
    total = sum(_local_weight(s, clock) for s in stores)
    if total == 0:
        openings = [o for s in stores if (o := s.next_opening(clock)) is not None]
        if not openings:
            raise ValueError("no simulated store ever opens: give one opening hours")
        return max(min(openings), clock + timedelta(seconds=1))
    gap = round(rng.expovariate(total / len(stores) / config.mean_gap_s))
    at = clock + timedelta(seconds=gap)
    weights = [_local_weight(s, at) for s in stores]
    if sum(weights) == 0:  # the gap ran past closing time: nobody is open then
        return at
    return at, rng.choices(layout, weights)[0]


def _late_delay_s(rng: random.Random, max_delay_s: float) -> float:
    # Log-uniform between just past the late threshold and the maximum: most late
    # receipts are minutes late, some hours (beyond any streaming watermark).
    low = LATE_THRESHOLD.total_seconds() + 1
    high = max(max_delay_s, low + 1)
    return float(round(low * (high / low) ** rng.random()))


def _delay_late(
    rng: random.Random, planned: list[_Planned], f: FaultConfig
) -> list[dict[str, Any]]:
    faults = []
    for p in planned:
        if f.late_rate and rng.random() < f.late_rate:
            # The delay counts from happened_at (as the contract's "late" does), so a
            # skewed device clock cannot make a late fault not late; never before the
            # receipt's own send time either.
            happened_ms = _ms(p.receipt.happened_at)
            draw_ms = int(_late_delay_s(rng, f.late_max_delay_s) * 1000)
            p.send_ms = max(p.send_ms, happened_ms + draw_ms)
            delay = (p.send_ms - happened_ms) / 1000
            p.held = True
            faults.append(
                {
                    "kind": "late",
                    **_key(p.receipt),
                    "delay_s": delay,
                    "detail": f"sent {delay:.0f} s after it was issued",
                }
            )
    return faults


def _reorder(rng: random.Random, planned: list[_Planned], f: FaultConfig) -> list[dict[str, Any]]:
    """Hold a receipt back until just after its device's next one.

    Only the earlier receipt moves (later), so nothing is sent before it happened;
    only neighbours less than LATE_THRESHOLD apart swap, so reordering never makes
    a receipt late (that is the late knob's job). A receipt moves at most once.
    """
    if not f.out_of_order_rate:
        return []
    faults = []
    by_device: dict[int, list[_Planned]] = {}
    for p in planned:
        by_device.setdefault(p.device.vendor_fiscal_module, []).append(p)
    for seq in by_device.values():
        for a, b in itertools.pairwise(seq):
            if a.held or b.held or not 0 <= b.send_ms - a.send_ms < _LATE_THRESHOLD_MS:
                continue
            if rng.random() < f.out_of_order_rate:
                held_ms = b.send_ms + 1 - a.send_ms
                a.send_ms, a.held, b.held = b.send_ms + 1, True, True
                faults.append(
                    {
                        "kind": "out_of_order",
                        **_key(a.receipt),
                        "delivered_after": b.receipt.transaction_id,
                        "held_ms": held_ms,
                        "detail": f"delivered after receipt {b.receipt.transaction_id} "
                        "of its device",
                    }
                )
    return faults


def _outbox(
    rng: random.Random, planned: list[_Planned], f: FaultConfig
) -> tuple[list[OutgoingMessage], dict[NaturalKey, int], list[dict[str, Any]]]:
    """Messages in send order (resends and malformed siblings added), copies per key."""
    # (send_ms, sequence, message): the sequence keeps equal timestamps in issue order.
    heap: list[tuple[int, int, OutgoingMessage]] = []
    copies: dict[NaturalKey, int] = {}
    faults: list[dict[str, Any]] = []

    def push(ms: int, key: bytes, value: bytes, kind: str) -> None:
        heap.append((ms, len(heap), OutgoingMessage(key, value, ms, kind)))

    for p in planned:
        push(p.send_ms, p.device.key, p.value, "receipt")
        copies[p.receipt.natural_key] = 1
        if f.resend_rate and rng.random() < f.resend_rate:
            # The terminal got no answer and sends the very same bytes again.
            after_ms = rng.randint(1000, 30000)
            push(p.send_ms + after_ms, p.device.key, p.value, "resend")
            copies[p.receipt.natural_key] += 1
            faults.append(
                {
                    "kind": "resend",
                    **_key(p.receipt),
                    "after_ms": after_ms,
                    "detail": f"same bytes sent again {after_ms} ms later",
                }
            )
        if f.malformed_rate and rng.random() < f.malformed_rate:
            kind, value, reason = malformed.make(rng, p.receipt)
            push(p.send_ms, p.device.key, value, f"malformed:{kind}")
            faults.append(
                {
                    "kind": "malformed",
                    "malformed_kind": kind,
                    "expected_reason": reason,
                    # The message's fingerprint: the auditor finds its dead letter by the
                    # raw value it stores (the ledger is written before Kafka assigns
                    # coordinates).
                    "value_sha256": hashlib.sha256(value).hexdigest(),
                    "detail": f"{kind} message; the validator must say {reason}",
                }
            )
    heapq.heapify(heap)
    return [heapq.heappop(heap)[2] for _ in range(len(heap))], copies, faults


def simulate(config: SimulationConfig) -> SimulationResult:
    rng = random.Random(config.seed)
    f = config.faults
    registry = catalog_stores(config.stores) if config.store_hours else []
    layout = _devices(rng, config.stores, f.clock_skew_max_s, registry)
    planned, faults = _issue_receipts(rng, config, layout)
    planned, lost = _lose_at_source(rng, planned, f)
    faults += lost
    faults += _delay_late(rng, planned, f)
    faults += _reorder(rng, planned, f)
    messages, copies, more = _outbox(rng, planned, f)
    faults += more
    receipts = [_ledger_line(p, copies[p.receipt.natural_key]) for p in planned]
    summary = _summary(config, messages, receipts, faults, layout)
    return SimulationResult(messages, receipts, faults, summary, registry)


def _ledger_line(p: _Planned, copies: int) -> dict[str, Any]:
    """Expected contribution of one unique receipt, computed here with Decimal."""
    r = p.receipt
    first_sent = datetime.fromtimestamp(p.send_ms / 1000, tz=UTC)
    # The store-local business day, by the zone (zoneinfo), for local-day totals to be
    # compared with: the views never see it, they are keyed by UTC windows.
    local = (
        {"local_day": p.device.store.local_day(r.happened_at).isoformat()} if p.device.store else {}
    )
    return {
        **_key(r),
        "happened_at": r.happened_at.isoformat(),
        "window_start": window_start(r.happened_at).isoformat(),
        "item_quantity": sum(i.amount for i in r.line_items),
        "revenue": str(sum((i.price * i.amount for i in r.line_items), Decimal("0.00"))),
        "line_count": len(r.line_items),
        # Value of the returned lines (price x |quantity| where quantity < 0): the
        # auditor's expected large_return alerts.
        "returned_value": str(
            sum((i.price * -i.amount for i in r.line_items if i.amount < 0), Decimal("0.00"))
        ),
        "first_sent_at": first_sent.isoformat(),
        "late": first_sent - r.happened_at > LATE_THRESHOLD,
        "copies": copies,
        **local,
    }


def _zones(layout: list[list[Device]]) -> dict[str, str]:
    return {str(ds[0].operation_id): ds[0].store.time_zone for ds in layout if ds[0].store}


def store_hours_record(stores: list[Store]) -> dict[str, dict[str, Any]]:
    """The ledger's record of the stores' hours (summary "store_hours"), by operation_id:
    what the auditor's expected silence alerts count (audit/expectations.py)."""
    return {
        str(s.operation_id): {"time_zone": s.time_zone, "opening_hours": s.opening_hours()}
        for s in stores
    }


def _summary(
    config: SimulationConfig,
    messages: list[OutgoingMessage],
    receipts: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    layout: list[list[Device]],
) -> dict[str, Any]:
    counts = dict.fromkeys(FAULT_KINDS, 0)
    kinds: dict[str, int] = {}
    for fault in faults:
        counts[fault["kind"]] += 1
        if fault["kind"] == "malformed":
            kinds[fault["malformed_kind"]] = kinds.get(fault["malformed_kind"], 0) + 1
    return {
        "seed": config.seed,
        "start": config.start.isoformat(),
        "unique_receipts": len(receipts),
        "lost_at_source": counts["lost_at_source"],
        "messages": len(messages),
        "late_receipts": sum(1 for r in receipts if r["late"]),
        "stores": len(layout),
        "devices": sum(len(d) for d in layout),
        "skewed_devices": sum(1 for ds in layout for d in ds if d.skew_s),
        "faults": counts,
        "malformed_kinds": kinds,
        "fault_config": {f.name: getattr(config.faults, f.name) for f in fields(config.faults)},
        "max_line_items": LIMITS.max_line_items,
        **(
            {
                "store_zones": _zones(layout),
                "store_hours": store_hours_record([ds[0].store for ds in layout if ds[0].store]),
            }
            if config.store_hours
            else {}
        ),
    }
