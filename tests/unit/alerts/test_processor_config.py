"""The processor's configuration and error classification (no Kafka)."""

from __future__ import annotations

from datetime import time, timedelta
from decimal import Decimal

import pytest
from confluent_kafka import KafkaError

from pos_lambda.alerts.processor import (
    Fatal,
    classify,
    rules_from,
    store_calendar,
    transactional_id,
)
from pos_lambda.alerts.rules import AlertConfig
from pos_lambda.settings import load_settings
from pos_lambda.stores.model import Store, parse_week
from pos_lambda.stores.registry import InMemoryStores


def test_defaults_and_transactional_id() -> None:
    s = load_settings()
    assert (s.alerts.mode, s.alerts.group_id, transactional_id(s)) == (
        "exactly_once",
        "pos-alerts",
        "pos-alerts-1",
    )
    assert rules_from(s) == AlertConfig(
        Decimal("100.00"), Decimal("10.00"), timedelta(minutes=30), time(7), time(21)
    )


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POS_ALERTS_INSTANCE_ID", "eu-2")
    monkeypatch.setenv("POS_ALERTS_HIGH_VALUE_THRESHOLD", "250.5")
    monkeypatch.setenv("POS_ALERTS_STORE_OPENS_AT", "08:30")
    s = load_settings()
    assert transactional_id(s) == "pos-alerts-eu-2"
    assert rules_from(s).high_value == Decimal("250.5")
    assert rules_from(s).store_opens == time(8, 30)


def test_the_store_calendar_comes_from_the_registry_once(caplog: pytest.LogCaptureFixture) -> None:
    kathmandu = Store.create(102, "Thamel", "Asia/Kathmandu", parse_week(["daily=07:00-21:00"]))
    registry = InMemoryStores([kathmandu])
    with caplog.at_level("INFO", logger="pos.alerts"):
        rules = rules_from(load_settings(), store_calendar(registry))
    assert "1 store(s) from the stores table (102 Asia/Kathmandu)" in caplog.text
    assert rules.hours_of(102) is kathmandu
    # Any other store: the default window, UTC, every day (POS_ALERTS_STORE_*_AT).
    default = rules.hours_of(101)
    assert (default.time_zone, default.opening_hours()["sun"]) == ("UTC", "07:00-21:00")
    # A snapshot: an edit after the start changes nothing for this instance.
    registry.put(kathmandu.with_changes(week=parse_week(["daily=closed"])))
    assert rules.hours_of(102) is kathmandu


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (KafkaError(KafkaError._FENCED, "fenced", fatal=True), "fenced"),
        (KafkaError(KafkaError.PRODUCER_FENCED), "fenced"),
        (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, fatal=True), "fenced"),
        (KafkaError(KafkaError._FATAL, "out of order sequence", fatal=True), "fatal"),
        (KafkaError(KafkaError._TIMED_OUT, retriable=True), "retry"),
        (KafkaError(KafkaError._STATE, txn_requires_abort=True), "abort"),
        (KafkaError(KafkaError._STATE), "fail"),
    ],
)
def test_classify(error: KafkaError, kind: str) -> None:
    assert classify(error) == kind
    assert Fatal(error).fenced is (kind == "fenced")
