"""The simulator's pure core against literal expectations."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.producer.simulation import (
    FaultConfig,
    SimulationConfig,
    encode,
    simulate,
)
from pos_lambda.schemas.contract import (
    REASONS,
    Invalid,
    LineItem,
    Receipt,
    parse_message,
    reason_code,
)

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _run(count: int = 1000, seed: int = 7, **faults: float):  # type: ignore[no-untyped-def]
    return simulate(
        SimulationConfig(count=count, seed=seed, start=START, faults=FaultConfig(**faults))
    )


def _receipts(result) -> list[Receipt]:  # type: ignore[no-untyped-def]
    parsed = [parse_message(m.value) for m in result.messages]
    return [r for r in parsed if isinstance(r, Receipt)]


ALL_FAULTS = {
    "resend_rate": 0.05,
    "burst_rate": 0.05,
    "late_rate": 0.05,
    "out_of_order_rate": 0.05,
    "clock_skew_max_s": 60,
    "malformed_rate": 0.05,
    "lost_at_source_rate": 0.02,
}


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a, b, c = _run(seed=1, **ALL_FAULTS), _run(seed=1, **ALL_FAULTS), _run(seed=2, **ALL_FAULTS)
    assert a.messages == b.messages and a.receipts == b.receipts and a.faults == b.faults
    assert [m.value for m in a.messages] != [m.value for m in c.messages]


def test_knobs_off_means_no_faults_and_exactly_n_messages() -> None:
    result = _run(count=500)
    assert result.summary["faults"] == {
        "resend": 0, "burst": 0, "late": 0, "out_of_order": 0, "malformed": 0,
        "lost_at_source": 0,
    }  # fmt: skip
    assert len(result.messages) == 500 == len(result.receipts)
    assert all(m.kind == "receipt" for m in result.messages)
    assert len({r.natural_key for r in _receipts(result)}) == 500
    # Sent when issued: the record timestamp is happened_at, nobody is late.
    for m, r in zip(result.messages, _receipts(result), strict=True):
        assert m.timestamp_ms == r.happened_at.timestamp() * 1000
    assert result.summary["late_receipts"] == 0


def test_fault_knobs_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        FaultConfig(resend_rate=1.5)
    with pytest.raises(ValueError, match="LATE_THRESHOLD"):
        FaultConfig(late_rate=0.1, late_max_delay_s=600)
    with pytest.raises(ValueError, match="timezone-aware"):
        SimulationConfig(count=1, seed=1, start=datetime(2026, 3, 2))


def test_receipt_numbers_increase_per_device_in_send_order() -> None:
    per_device: dict[int, list[int]] = {}
    for r in _receipts(_run(count=2000)):
        per_device.setdefault(r.vendor_fiscal_module, []).append(r.transaction_id)
    assert len(per_device) > 20
    for tids in per_device.values():
        assert tids == sorted(tids) and len(set(tids)) == len(tids)


def test_keys_keep_a_device_in_one_partition() -> None:
    for m in _run(count=200).messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        assert m.key == f"{r.operation_id}:{r.vendor_fiscal_module}".encode()


def test_resends_are_identical_bytes_counted_in_the_ledger() -> None:
    result = _run(count=1000, resend_rate=0.05)
    resends = result.summary["faults"]["resend"]
    assert 20 < resends < 80
    assert len(result.messages) == 1000 + resends
    copies = Counter(m.value for m in result.messages)
    assert sum(n - 1 for n in copies.values()) == resends
    assert sum(r["copies"] - 1 for r in result.receipts) == resends
    keys = Counter(r.natural_key for r in _receipts(result))
    assert len(keys) == 1000
    assert sum(n - 1 for n in keys.values()) == resends  # duplicate natural keys
    resent = {
        (f["operation_id"], f["vendor_fiscal_module"], f["transaction_id"]): f["after_ms"]
        for f in result.faults
        if f["kind"] == "resend"
    }
    assert {k for k, n in keys.items() if n == 2} == set(resent)
    stamps: dict[tuple[int, int, int], list[int]] = {}
    for m in result.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        stamps.setdefault(r.natural_key, []).append(m.timestamp_ms)
    for key, after_ms in resent.items():
        first, again = stamps[key]
        assert again - first == after_ms and 1000 <= after_ms <= 30000


def test_malformed_messages_fail_validation_with_the_recorded_reason() -> None:
    result = _run(count=1000, malformed_rate=0.05)
    bad = [m for m in result.messages if m.kind.startswith("malformed:")]
    expected = [f["expected_reason"] for f in result.faults if f["kind"] == "malformed"]
    assert len(bad) == result.summary["faults"]["malformed"] == len(expected) > 20
    got = [parse_message(m.value) for m in bad]
    assert all(isinstance(g, Invalid) for g in got)
    assert Counter(g.reason for g in got) == Counter(expected)  # type: ignore[union-attr]
    assert all(reason_code(r) in REASONS for r in expected)
    assert {r for r in expected if r.startswith("wrong_type")} == {
        "wrong_type:operation_id",
        "wrong_type:transactions.0.price",
        "wrong_type:transactions.0.amount",
    }
    assert set(result.summary["malformed_kinds"]) == {
        "broken_json", "missing_field", "wrong_type", "negative_price", "oversized_list",
    }  # fmt: skip
    assert len(result.messages) == 1000 + len(bad)


def _key(f: dict[str, Any]) -> tuple[int, int, int]:
    return (f["operation_id"], f["vendor_fiscal_module"], f["transaction_id"])


def test_late_messages_carry_their_delay_in_the_kafka_timestamp() -> None:
    result = _run(count=1000, late_rate=0.1, late_max_delay_s=7200)
    late = {_key(f): f["delay_s"] for f in result.faults if f["kind"] == "late"}
    assert 50 < len(late) < 150
    for m in result.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        delay = m.timestamp_ms / 1000 - r.happened_at.timestamp()
        if r.natural_key in late:
            assert delay == late[r.natural_key]
            assert 15 * 60 < delay <= 7200
        else:
            assert delay == 0
    assert {_key(r) for r in result.receipts if r["late"]} == set(late)
    assert result.summary["late_receipts"] == len(late)
    # With skewed device clocks too, every late fault is a late receipt by the
    # contract's definition, and the recorded delay is still timestamp - happened_at.
    skewed = _run(count=1000, late_rate=0.1, clock_skew_max_s=600)
    late_skewed = {_key(f): f["delay_s"] for f in skewed.faults if f["kind"] == "late"}
    ledger_late = {_key(r) for r in skewed.receipts if r["late"]}
    assert set(late_skewed) <= ledger_late
    for m in skewed.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        if r.natural_key in late_skewed:
            assert m.timestamp_ms / 1000 - r.happened_at.timestamp() == late_skewed[r.natural_key]
    # Some delays go beyond an hour: past any reasonable streaming watermark.
    assert max(late.values()) > 3600
    # Sent in timestamp order, so late receipts arrive out of event-time order.
    stamps = [m.timestamp_ms for m in result.messages]
    assert stamps == sorted(stamps)
    happened = [r.happened_at for r in _receipts(result)]
    assert happened != sorted(happened)


def test_bursts_put_several_receipts_of_one_store_in_one_second() -> None:
    result = _run(count=1000, burst_rate=0.1)
    by_key = {r.natural_key: r for r in _receipts(result)}
    bursts = [f for f in result.faults if f["kind"] == "burst"]
    assert len(bursts) == result.summary["faults"]["burst"] > 20
    for f in bursts:
        members = [by_key[tuple(k)] for k in f["natural_keys"]]  # type: ignore[index]
        assert 2 <= len(members) == f["receipts"] <= 4
        assert {r.operation_id for r in members} == {f["operation_id"]}
        assert {r.happened_at.isoformat() for r in members} == {f["at"]}
    assert len(result.receipts) == 1000 == len(by_key)


def test_out_of_order_holds_a_receipt_until_after_its_successor() -> None:
    result = _run(count=1000, out_of_order_rate=0.05)
    held = {_key(f) for f in result.faults if f["kind"] == "out_of_order"}
    assert len(held) == result.summary["faults"]["out_of_order"] > 10
    # A receipt is delivered after a higher-numbered receipt of its device exactly
    # when the knob held it back.
    delivered_late: set[tuple[int, int, int]] = set()
    seen: dict[int, list[Receipt]] = {}
    for r in _receipts(result):
        earlier = seen.setdefault(r.vendor_fiscal_module, [])
        if any(e.transaction_id > r.transaction_id for e in earlier):
            delivered_late.add(r.natural_key)
        earlier.append(r)
    assert delivered_late == held
    # Nothing is sent before it happened, and reordering makes nobody late.
    for m in result.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        assert 0 <= m.timestamp_ms / 1000 - r.happened_at.timestamp() <= 15 * 60
    assert result.summary["late_receipts"] == 0


def test_clock_skew_shifts_happened_at_per_device() -> None:
    plain, skewed = _run(count=300), _run(count=300, clock_skew_max_s=120)
    assert skewed.summary["skewed_devices"] > 0
    offsets: dict[int, set[float]] = {}
    for m in skewed.messages:
        r = parse_message(m.value)
        assert isinstance(r, Receipt)
        offsets.setdefault(r.vendor_fiscal_module, set()).add(
            m.timestamp_ms / 1000 - r.happened_at.timestamp()
        )
    assert all(len(o) == 1 for o in offsets.values())  # fixed per device
    assert sum(1 for o in offsets.values() if o != {0}) == skewed.summary["skewed_devices"]
    assert all(abs(x) <= 120 for o in offsets.values() for x in o)
    assert plain.summary["skewed_devices"] == 0


def test_all_faults_at_once_keep_the_books_straight() -> None:
    result = _run(count=2000, seed=11, **ALL_FAULTS)
    faults = result.summary["faults"]
    assert all(n > 0 for n in faults.values()), faults
    sent = 2000 - faults["lost_at_source"]  # issued by the tills, less what never left them
    assert (
        result.summary["messages"]
        == len(result.messages)
        == (sent + faults["resend"] + faults["malformed"])
    )
    valid = _receipts(result)
    assert len(valid) == sent + faults["resend"]
    assert len({r.natural_key for r in valid}) == sent == len(result.receipts)
    assert sum(r["copies"] for r in result.receipts) == len(valid)
    assert result.summary["late_receipts"] == sum(1 for r in result.receipts if r["late"])
    assert all(f["detail"] for f in result.faults)


def test_encode_prints_local_time_with_offset() -> None:
    r = Receipt(
        datetime(2026, 3, 2, 22, 30, tzinfo=UTC), 1, 5, 9, (LineItem("Tea", Decimal("1.50"), 2),)
    )
    assert encode(r, utc_offset_h=2) == (
        b'{"happened_at":"2026-03-03T00:30:00+02:00","operation_id":1,"transaction_id":5,'
        b'"vendor_fiscal_module":9,"transactions":[{"title":"Tea","price":"1.50","amount":2}]}'
    )


def test_receipts_lost_at_the_till_are_numbered_never_sent_and_recorded() -> None:
    issued = _run(count=2000, seed=5)
    lossy = _run(count=2000, seed=5, lost_at_source_rate=0.02)
    lost = [f for f in lossy.faults if f["kind"] == "lost_at_source"]
    lost_keys = {tuple(f["natural_key"]) for f in lost}
    # The same tills issued the same receipts; about 2 % never left them.
    assert {r.natural_key for r in _receipts(issued)} == (
        {r.natural_key for r in _receipts(lossy)} | lost_keys
    )
    assert 20 <= len(lost) <= 60 and lossy.summary["lost_at_source"] == len(lost)
    assert len(lossy.receipts) == 2000 - len(lost) == lossy.summary["unique_receipts"]
    sent = {
        (b["operation_id"], b["vendor_fiscal_module"], b["transaction_id"])
        for b in (json.loads(m.value) for m in lossy.messages)
    }
    assert not sent & lost_keys
    assert all("never left the till" in f["detail"] for f in lost)
