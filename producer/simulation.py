"""The POS simulator's pure core: receipts, fault injection and the ground truth.

`simulate(config)` returns the messages to send (in send order, each with its
Kafka key and record timestamp) and the ledger: every unique receipt with its
expected contribution and every injected fault. Nothing here touches Kafka or the
clock; the same config and seed give the same bytes.

Time model: a simulated clock advances by exponential gaps shaped by a daily
traffic curve. A receipt *happens* at clock time plus its device's clock skew and
is normally *sent* (Kafka record timestamp) at clock time; a late receipt is sent
after a delay, so messages go out in send-time order and late ones arrive out of
order by event time.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from producer import malformed
from producer.catalog import HOURLY_TRAFFIC, ITEMS, STORE_UTC_OFFSETS
from schemas.contract import LATE_THRESHOLD, LIMITS, WINDOW, LineItem, Receipt


@dataclass(frozen=True)
class FaultConfig:
    """Each knob off (0) by default. Rates are per unique receipt."""

    resend_rate: float = 0.0  # realistic: 0.006 (terminals retrying over GPRS)
    burst_rate: float = 0.0  # a receipt starts a same-second burst in its store
    late_rate: float = 0.0
    late_max_delay_s: float = 6 * 3600.0
    out_of_order_rate: float = 0.0
    clock_skew_max_s: float = 0.0
    malformed_rate: float = 0.0


@dataclass(frozen=True)
class SimulationConfig:
    count: int
    seed: int
    start: datetime
    stores: int = 20
    mean_gap_s: float = 2.0  # mean simulated seconds between receipts at peak traffic
    faults: FaultConfig = field(default_factory=FaultConfig)


@dataclass(frozen=True)
class OutgoingMessage:
    key: bytes | None
    value: bytes
    timestamp_ms: int
    kind: str  # "receipt", "resend" or "malformed:<kind>"


@dataclass(frozen=True)
class Device:
    operation_id: int
    vendor_fiscal_module: int
    skew_s: int
    utc_offset_h: int

    @property
    def key(self) -> bytes:
        return f"{self.operation_id}:{self.vendor_fiscal_module}".encode()


@dataclass
class _Planned:
    receipt: Receipt
    device: Device
    send_ms: int
    value: bytes


@dataclass(frozen=True)
class SimulationResult:
    messages: list[OutgoingMessage]
    receipts: list[dict[str, Any]]  # ledger lines, one per unique receipt
    faults: list[dict[str, Any]]  # ledger lines, one per injected fault
    summary: dict[str, Any]


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _devices(rng: random.Random, stores: int, skew_max_s: float) -> list[list[Device]]:
    layout, next_vfm = [], 1001
    for i in range(stores):
        op, offset = 101 + i, STORE_UTC_OFFSETS[i % len(STORE_UTC_OFFSETS)]
        devs = []
        for _ in range(rng.randint(1, 4)):
            skew = round(rng.uniform(-skew_max_s, skew_max_s)) if skew_max_s else 0
            devs.append(Device(op, next_vfm, skew, offset))
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


def encode(receipt: Receipt, utc_offset_h: int = 0) -> bytes:
    """The message bytes: compact JSON, happened_at in the store's local offset."""
    doc = receipt.to_json()
    local = receipt.happened_at.astimezone(timezone(timedelta(hours=utc_offset_h)))
    doc["happened_at"] = local.isoformat()
    return json.dumps(doc, separators=(",", ":")).encode()


def _late_delay_s(rng: random.Random, max_delay_s: float) -> float:
    # Log-uniform between just past the late threshold and the maximum: most late
    # receipts are minutes late, some hours (beyond any streaming watermark).
    low = LATE_THRESHOLD.total_seconds() + 1
    high = max(max_delay_s, low + 1)
    return float(round(low * (high / low) ** rng.random()))


def simulate(config: SimulationConfig) -> SimulationResult:
    rng = random.Random(config.seed)
    f = config.faults
    layout = _devices(rng, config.stores, f.clock_skew_max_s)
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
        p = _Planned(receipt, device, _ms(at), encode(receipt, device.utc_offset_h))
        planned.append(p)
        return p

    while len(planned) < config.count:
        weight = HOURLY_TRAFFIC[clock.hour]
        clock += timedelta(seconds=round(rng.expovariate(weight / config.mean_gap_s)))
        store = rng.choice(layout)
        first = issue(rng.choice(store), clock)
        if f.burst_rate and rng.random() < f.burst_rate:
            extra = min(rng.randint(1, 3), config.count - len(planned))
            for _ in range(extra):
                issue(rng.choice(store), clock)  # same store, same second
            faults.append(
                {
                    "kind": "burst",
                    "operation_id": first.device.operation_id,
                    "at": clock.isoformat(),
                    "receipts": extra + 1,
                }
            )

    for p in planned:
        if f.late_rate and rng.random() < f.late_rate:
            delay = _late_delay_s(rng, f.late_max_delay_s)
            p.send_ms += int(delay * 1000)
            faults.append({"kind": "late", **_key(p.receipt), "delay_s": delay})

    if f.out_of_order_rate:
        by_device: dict[int, list[_Planned]] = {}
        for p in planned:
            by_device.setdefault(p.device.vendor_fiscal_module, []).append(p)
        for seq in by_device.values():
            for a, b in itertools.pairwise(seq):
                if rng.random() < f.out_of_order_rate and a.send_ms < b.send_ms:
                    a.send_ms, b.send_ms = b.send_ms + 1, a.send_ms
                    faults.append(
                        {
                            "kind": "out_of_order",
                            **_key(a.receipt),
                            "swapped_with": b.receipt.transaction_id,
                        }
                    )

    # (send_ms, sequence, message): the sequence keeps equal timestamps in a stable order.
    outbox: list[tuple[int, int, OutgoingMessage]] = []
    copies: dict[tuple[int, int, int], int] = {}
    for p in planned:
        outbox.append(
            (p.send_ms, len(outbox), OutgoingMessage(p.device.key, p.value, p.send_ms, "receipt"))
        )
        copies[p.receipt.natural_key] = 1
        if f.resend_rate and rng.random() < f.resend_rate:
            resend_ms = p.send_ms + rng.randint(1000, 30000)
            outbox.append(
                (
                    resend_ms,
                    len(outbox),
                    OutgoingMessage(p.device.key, p.value, resend_ms, "resend"),
                )
            )
            copies[p.receipt.natural_key] += 1
            faults.append({"kind": "resend", **_key(p.receipt), "after_ms": resend_ms - p.send_ms})
        if f.malformed_rate and rng.random() < f.malformed_rate:
            kind, value, reason = malformed.make(rng, p.receipt)
            outbox.append(
                (
                    p.send_ms,
                    len(outbox),
                    OutgoingMessage(p.device.key, value, p.send_ms, f"malformed:{kind}"),
                )
            )
            faults.append({"kind": "malformed", "malformed_kind": kind, "expected_reason": reason})
    heapq.heapify(outbox)
    messages = [heapq.heappop(outbox)[2] for _ in range(len(outbox))]

    receipts = [_ledger_line(p, copies[p.receipt.natural_key]) for p in planned]
    summary = _summary(config, messages, receipts, faults, layout)
    return SimulationResult(messages, receipts, faults, summary)


def _key(r: Receipt) -> dict[str, int]:
    return {
        "operation_id": r.operation_id,
        "vendor_fiscal_module": r.vendor_fiscal_module,
        "transaction_id": r.transaction_id,
    }


def window_start(t: datetime) -> datetime:
    seconds = int(WINDOW.total_seconds())
    epoch = int(t.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _ledger_line(p: _Planned, copies: int) -> dict[str, Any]:
    """Expected contribution of one unique receipt, computed here with Decimal."""
    r = p.receipt
    first_sent = datetime.fromtimestamp(p.send_ms / 1000, tz=UTC)
    return {
        **_key(r),
        "happened_at": r.happened_at.isoformat(),
        "window_start": window_start(r.happened_at).isoformat(),
        "item_quantity": sum(i.amount for i in r.line_items),
        "revenue": str(sum((i.price * i.amount for i in r.line_items), Decimal("0.00"))),
        "line_count": len(r.line_items),
        "first_sent_at": first_sent.isoformat(),
        "late": first_sent - r.happened_at > LATE_THRESHOLD,
        "copies": copies,
    }


def _summary(
    config: SimulationConfig,
    messages: list[OutgoingMessage],
    receipts: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    layout: list[list[Device]],
) -> dict[str, Any]:
    counts = {k: 0 for k in ("resend", "burst", "late", "out_of_order", "malformed")}
    kinds: dict[str, int] = {}
    for fault in faults:
        counts[fault["kind"]] += 1
        if fault["kind"] == "malformed":
            kinds[fault["malformed_kind"]] = kinds.get(fault["malformed_kind"], 0) + 1
    return {
        "seed": config.seed,
        "start": config.start.isoformat(),
        "unique_receipts": len(receipts),
        "messages": len(messages),
        "late_receipts": sum(1 for r in receipts if r["late"]),
        "stores": len(layout),
        "devices": sum(len(d) for d in layout),
        "skewed_devices": sum(1 for ds in layout for d in ds if d.skew_s),
        "faults": counts,
        "malformed_kinds": kinds,
        "fault_config": {k: getattr(config.faults, k) for k in config.faults.__dataclass_fields__},
        "max_line_items": LIMITS.max_line_items,
    }
