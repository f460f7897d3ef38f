"""The alert rules: pure functions of one input partition's records, in offset order.

No Kafka, no clock: `PartitionState.apply` takes a record (its bytes and Kafka
coordinates), updates the partition's rule state and returns the alerts it triggers.
Everything is decided by the records themselves (event time is `happened_at`), so
replaying a partition from its start gives the same alerts, byte for byte. The
processor (src/pos_lambda/alerts/processor.py) relies on that to rebuild the state after a restart.

The rules (their thresholds in `AlertConfig`, from the POS_ALERTS_* settings):

- **high_value**: the receipt's total (sum of price x quantity) exceeds a threshold.
- **large_return**: its returned lines (negative quantities) are worth more than a
  threshold (sum of price x |quantity| over those lines).
- **conflict**: a copy of an already-seen natural key with a different content (its
  `happened_at` instant and typed line items, hashed as `pos_lambda.views.content`
  defines it for the speed and batch layers too): one alert per distinct conflicting
  content. Resends (same content) never alert.
- **device_silent**: a device's receipt comes more than `silence` of store hours after
  the latest `happened_at` seen from that device before. Store hours are the store's
  own, per weekday in its IANA time zone (the `stores` table, `AlertConfig.stores`; DST
  days included, pos_lambda.stores.store_time); a store the table does not know gets the
  default daily window `store_opens`-`store_closes`, UTC. A device that never sends
  again is not reported: there is no event time to say it is silent.

Only a receipt's first copy in the partition (the winner of `pos_lambda.views.winners`: lowest
offset, as `pos_lambda.views.copies` applies it record by record) feeds the value, return
and silence rules; later copies feed only the conflict rule. All copies of a receipt
share a partition (the producer keys by device), so the state of one partition is all
a rule needs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from functools import cached_property
from typing import TypeVar

from pos_lambda.schemas.contract import LIMITS, NaturalKey, Receipt, parse_message
from pos_lambda.stores.model import Hours, Store
from pos_lambda.stores.store_time import store_time
from pos_lambda.transactional.step import Output, Source
from pos_lambda.views.content import content_hash
from pos_lambda.views.copies import Copies, KeyCopies

Device = tuple[int, int]  # (operation_id, vendor_fiscal_module)

RULES = ("high_value", "large_return", "conflict", "device_silent")
# uuid5 namespace of alert ids: a fixed constant, so ids never change between versions.
ALERT_NAMESPACE = uuid.UUID("6c1b7a52-5f7e-4d0e-9a54-2f4a3c9d8e10")


DEFAULT_HOURS_ZONE = "UTC"


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds and the store calendar: an input value, like the records, so the
    alerts stay a pure function of both (the processor reads the calendar once, at
    start: src/pos_lambda/alerts/processor.py says why)."""

    high_value: Decimal
    large_return: Decimal
    silence: timedelta
    store_opens: time  # UTC: the default window, for stores not in `stores`
    store_closes: time  # UTC, after store_opens
    stores: Mapping[int, Store] = field(default_factory=dict)  # by operation_id

    def __post_init__(self) -> None:
        if not self.store_opens < self.store_closes:
            raise ValueError(
                f"store hours must open before they close on the same day (UTC), got "
                f"{self.store_opens:%H:%M}-{self.store_closes:%H:%M}"
            )
        if self.silence <= timedelta(0):
            raise ValueError(f"silence must be positive, got {self.silence}")
        wrong = [(k, s.operation_id) for k, s in self.stores.items() if k != s.operation_id]
        if wrong:
            raise ValueError(f"stores must be keyed by their operation_id, got {wrong}")

    @cached_property
    def default_store(self) -> Store:
        """The default window as a store: every day, UTC."""
        minutes = [t.hour * 60 + t.minute for t in (self.store_opens, self.store_closes)]
        return Store(0, "default store hours", DEFAULT_HOURS_ZONE, (Hours(*minutes),) * 7)

    def hours_of(self, operation_id: int) -> Store:
        """Whose hours judge a silence at this store: its own, or the default window."""
        return self.stores.get(operation_id) or self.default_store


@dataclass(frozen=True)
class Alert:
    alert_id: str
    rule: str
    operation_id: int
    vendor_fiscal_module: int
    transaction_id: int
    happened_at: datetime  # UTC, of the triggering copy
    detail: dict[str, str]
    source: Source

    def to_json(self) -> bytes:
        """The record value in `pos.alerts`: compact, keys sorted (same alert, same bytes)."""
        doc = {
            "alert_id": self.alert_id,
            "rule": self.rule,
            "operation_id": self.operation_id,
            "vendor_fiscal_module": self.vendor_fiscal_module,
            "transaction_id": self.transaction_id,
            "happened_at": self.happened_at.isoformat(),
            "detail": self.detail,
            "source": {
                "partition": self.source.partition,
                "offset": self.source.offset,
                "timestamp_ms": self.source.timestamp_ms,
            },
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, value: bytes | None) -> Alert:
        """Parse a record of `pos.alerts`; NotAnAlert (a ValueError) for anything else."""
        try:
            return _read_alert(value)
        except NotAnAlert:
            raise
        # Whatever else a stranger's bytes make the standard library raise (deep nesting,
        # an instant an offset pushes past year 1 or 9999, a null where a dict belongs):
        # still a record we cannot read, never a crash of the reader.
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError,
                RecursionError) as exc:  # fmt: skip
            raise NotAnAlert(f"{type(exc).__name__}: {exc}") from exc


class NotAnAlert(ValueError):
    """A record of the alerts topic that the processor did not write (or not this way)."""


_INT32, _INT64 = 2**31 - 1, 2**63 - 1
_T = TypeVar("_T")


def _read_alert(value: bytes | None) -> Alert:
    # Checked field by field so that every accepted alert is a row Cassandra takes:
    # UTF-8 text (the payload column), ids in their CQL ranges, a UTC instant.
    if value is None:
        raise NotAnAlert("no value (a tombstone)")
    doc = json.loads(value.decode("utf-8"))
    if not isinstance(doc, dict):
        raise NotAnAlert(f"a JSON {type(doc).__name__}, not an object")
    src = _field(doc, "source", dict)
    detail = _field(doc, "detail", dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in detail.items()):
        raise NotAnAlert("detail must map strings to strings")
    for text in [*detail, *detail.values()]:
        _utf8(text)
    rule = _field(doc, "rule", str)
    if rule not in RULES:
        raise NotAnAlert(f"unknown rule {rule!r}")
    aid = _field(doc, "alert_id", str)
    if _canonical_uuid(aid) != aid:
        raise NotAnAlert(f"alert_id {aid!r} is not a UUID")
    happened_at = datetime.fromisoformat(_field(doc, "happened_at", str))
    if happened_at.tzinfo is None:
        raise NotAnAlert("happened_at has no offset")
    return Alert(
        alert_id=aid,
        rule=rule,
        operation_id=_int(doc, "operation_id", 1, LIMITS.max_store_or_device_id),
        vendor_fiscal_module=_int(doc, "vendor_fiscal_module", 1, LIMITS.max_store_or_device_id),
        transaction_id=_int(doc, "transaction_id", 1, LIMITS.max_transaction_id),
        happened_at=happened_at.astimezone(UTC),  # OverflowError near year 1 or 9999
        detail=detail,
        source=Source(
            _int(src, "partition", 0, _INT32),
            _int(src, "offset", 0, _INT64),
            _int(src, "timestamp_ms", -_INT64, _INT64),
        ),
    )


def _field(doc: dict[str, object], name: str, kind: type[_T]) -> _T:
    if name not in doc:
        raise NotAnAlert(f"no {name}")
    value = doc[name]
    if not isinstance(value, kind):
        raise NotAnAlert(f"{name} is a JSON {type(value).__name__}, not a {kind.__name__}")
    return value


def _int(doc: dict[str, object], name: str, low: int, high: int) -> int:
    value = _field(doc, name, int)
    if isinstance(value, bool) or not low <= value <= high:  # bool: JSON true is not an id
        raise NotAnAlert(f"{name} {value!r} outside [{low}, {high}]")
    return value


def _utf8(text: str) -> None:
    try:
        text.encode("utf-8")  # a lone surrogate ("\\ud800") would fail at the driver
    except UnicodeEncodeError as exc:
        raise NotAnAlert(f"text {text!r} is not valid UTF-8") from exc


def _canonical_uuid(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def alert_id(rule: str, key: NaturalKey, content_hash: str = "") -> str:
    """Deterministic id: the rule and the triggering receipt (and, for a conflict, the
    conflicting content), so a replay re-emits an alert under the same id."""
    name = ":".join([rule, *map(str, key), *([content_hash] if content_hash else [])])
    return str(uuid.uuid5(ALERT_NAMESPACE, name))


def returned_value(receipt: Receipt) -> Decimal:
    return sum((i.price * -i.amount for i in receipt.line_items if i.amount < 0), Decimal("0.00"))


@dataclass
class PartitionState:
    """Rule state of one input partition, a pure function of its records so far."""

    copies: Copies = field(default_factory=Copies)
    last_activity: dict[Device, datetime] = field(default_factory=dict)
    records: int = 0  # applied, valid or not
    invalid: int = 0

    def apply(self, rules: AlertConfig, value: bytes | None, source: Source) -> list[Alert]:
        """Feed one record (in offset order); the alerts it triggers, in rule order."""
        self.records += 1
        parsed = parse_message(value) if value is not None else None
        if not isinstance(parsed, Receipt):
            self.invalid += 1  # bad input is the speed layer's to dead-letter, not an alert
            return []
        digest = content_hash(parsed.happened_at, parsed.line_items)
        verdict, seen = self.copies.observe(parsed.natural_key, digest, source.offset)
        if verdict == "resend":
            return []  # a resend (of the first copy or of an earlier conflicting one)
        if verdict == "conflict":
            return [_conflict(parsed, digest, seen, source)]
        return [*_value_alerts(rules, parsed, source), *self._silence(rules, parsed, source)]

    def _silence(self, rules: AlertConfig, r: Receipt, source: Source) -> list[Alert]:
        device = (r.operation_id, r.vendor_fiscal_module)
        last = self.last_activity.get(device)
        if last is None or r.happened_at > last:
            self.last_activity[device] = r.happened_at
        if last is None or r.happened_at <= last:
            return []  # the first receipt of the device, or one that arrived late
        if r.happened_at - last <= rules.silence:
            return []  # store time never exceeds the wall time: no need to count it
        store = rules.hours_of(r.operation_id)
        silent = store_time(store, last, r.happened_at)
        if silent <= rules.silence:
            return []
        detail = {
            "silent_since": last.isoformat(),
            "store_minutes_silent": f"{silent / timedelta(minutes=1):.1f}",
            "threshold_minutes": f"{rules.silence / timedelta(minutes=1):g}",
            # Which hours judged it: the store's zone, or "default" (not in `stores`).
            "store_hours": store.time_zone if r.operation_id in rules.stores else "default",
        }
        return [_alert("device_silent", r, detail, source)]


def _alert(
    rule: str, r: Receipt, detail: dict[str, str], source: Source, digest: str = ""
) -> Alert:
    return Alert(
        alert_id=alert_id(rule, r.natural_key, digest),
        rule=rule,
        operation_id=r.operation_id,
        vendor_fiscal_module=r.vendor_fiscal_module,
        transaction_id=r.transaction_id,
        happened_at=r.happened_at,
        detail=detail,
        source=source,
    )


def _value_alerts(rules: AlertConfig, r: Receipt, source: Source) -> list[Alert]:
    alerts = []
    if r.revenue > rules.high_value:
        detail = {"revenue": str(r.revenue), "threshold": str(rules.high_value)}
        alerts.append(_alert("high_value", r, detail, source))
    returned = returned_value(r)
    if returned > rules.large_return:
        detail = {"returned_value": str(returned), "threshold": str(rules.large_return)}
        alerts.append(_alert("large_return", r, detail, source))
    return alerts


def _conflict(r: Receipt, digest: str, seen: KeyCopies, source: Source) -> Alert:
    detail = {
        "content_hash": digest,
        "first_content_hash": seen.first_hash,
        "first_offset": str(seen.first_offset),
        "revenue": str(r.revenue),
    }
    return _alert("conflict", r, detail, source, digest)


@dataclass(frozen=True)
class AlertStep:
    """The rules as a transactional processor's step (transactional/step.py): each alert
    keyed by its id."""

    rules: AlertConfig

    def initial(self) -> PartitionState:
        return PartitionState()

    def apply(self, state: PartitionState, value: bytes | None, source: Source) -> list[Output]:
        alerts = state.apply(self.rules, value, source)
        return [Output(a.alert_id.encode(), a.to_json()) for a in alerts]
