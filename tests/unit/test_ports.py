"""The ports (src/pos_lambda/adapters/): the Kafka port's real clients take their
configuration from it, with a caller's overrides on top, and no code outside adapters/
builds a confluent-kafka client itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import pytest

from pos_lambda.adapters.kafka_clients import ConfluentClients

ROOT = Path(__file__).resolve().parents[2]
CODE = [ROOT / "src" / "pos_lambda", ROOT / "dev" / "src" / "pos_lambda_dev"]
ADAPTERS = ROOT / "src" / "pos_lambda" / "adapters"


class _Recorder:
    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.made.append(config)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    _Recorder.made = []
    monkeypatch.setattr(confluent_kafka, "Producer", _Recorder)
    monkeypatch.setattr(confluent_kafka, "Consumer", _Recorder)
    return _Recorder.made


def test_a_producer_is_the_ports_idempotent_one_with_the_callers_overrides(
    made: list[dict[str, Any]],
) -> None:
    clients = ConfluentClients("k1:9092", {"security.protocol": "SASL_SSL"})
    logger = object()
    clients.producer(logger=logger)
    assert made == [
        {
            "security.protocol": "SASL_SSL",
            "bootstrap.servers": "k1:9092",
            "log_level": 3,
            "topic.metadata.refresh.interval.ms": 5000,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "logger": logger,
        }
    ]


def test_an_offsets_reader_never_auto_commits_and_takes_overrides(
    made: list[dict[str, Any]],
) -> None:
    ConfluentClients("k1:9092").offsets_reader("pos-chaos-count", log_level=2)
    assert made == [
        {
            "bootstrap.servers": "k1:9092",
            "log_level": 2,
            "topic.metadata.refresh.interval.ms": 5000,
            "group.id": "pos-chaos-count",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    ]


def _python_files() -> list[Path]:
    return [p for root in CODE for p in sorted(root.rglob("*.py"))]


def test_no_kafka_client_is_built_outside_the_port() -> None:
    built = re.compile(r"\b(Producer|Consumer|AdminClient)\(")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files()
        if ADAPTERS not in p.parents
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if built.search(line)
    ]
    assert found == []


def test_no_private_confluent_kafka_module_is_imported() -> None:
    private = re.compile(r"confluent_kafka\.[a-z_.]*\._")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []
