"""`pos-receipts`: help, defaults and bad configuration (no Kafka)."""

from __future__ import annotations

from typing import Any

import pytest

from pos_lambda.adapters.kafka_clients import ConfluentClients
from pos_lambda.dedup import cli
from pos_lambda.dedup.processor import job, processor
from pos_lambda.settings import load_settings


def test_defaults_name_the_topics_group_and_transactional_id() -> None:
    j = job(load_settings())
    assert (j.input_topic, j.output_topic, j.section.group_id, j.transactional_id) == (
        "pos.transactions",
        "pos.receipts",
        "pos-receipts",
        "pos-receipts-1",
    )
    assert (j.section.mode, j.section.metrics_port, j.env_prefix) == (
        "exactly_once",
        9412,
        "POS_RECEIPTS_",
    )


def test_the_environment_and_flags_set_the_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POS_RECEIPTS_INSTANCE_ID", "eu-2")
    assert job(load_settings()).transactional_id == "pos-receipts-eu-2"
    args = cli.build_parser().parse_args(["run", "--instance-id", "7", "--output-topic", "x"])
    s = cli._settings(args)
    assert (job(s).transactional_id, s.topics.receipts) == ("pos-receipts-7", "x")


class ConfigSpy:
    """The real Kafka port, keeping the configuration of each client it builds."""

    def __init__(self, real: ConfluentClients) -> None:
        self.real, self.configs = real, dict[str, dict[str, Any]]()

    def group_consumer(self, group_id: str, **options: Any) -> Any:
        self.configs["consumer"] = self.real.group_consumer_config(group_id, **options)
        return self.real.group_consumer(group_id, **options)

    def transactional_producer(self, transactional_id: str, timeout_ms: int, error_cb: Any) -> Any:
        config = self.real.transactional_producer_config(transactional_id, timeout_ms)
        self.configs["producer"] = config
        return self.real.transactional_producer(transactional_id, timeout_ms, error_cb)

    def reader(self) -> Any:
        return self.real.reader()

    def producer(self, **options: Any) -> Any:
        return self.real.producer(**options)


def test_the_processor_reads_committed_and_writes_transactionally_under_its_own_id() -> None:
    # Nothing listens on port 1: the clients are built, never reach a broker.
    s = load_settings(kafka_bootstrap_servers="127.0.0.1:1", receipts_instance_id="eu-2")
    clients = ConfigSpy(ConfluentClients.from_settings(s))
    proc = processor(s, clients=clients)
    try:
        consumer, producer = clients.configs["consumer"], clients.configs["producer"]
        assert {
            k: consumer[k]
            for k in ("group.id", "isolation.level", "enable.auto.commit", "group.instance.id")
        } == {
            "group.id": "pos-receipts",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "group.instance.id": "pos-receipts-eu-2",
        }
        assert (producer["transactional.id"], producer["enable.idempotence"]) == (
            "pos-receipts-eu-2",
            True,
        )
        assert (proc.topic, proc.job.output_topic, proc.failpoint) == (
            "pos.transactions",
            "pos.receipts",
            "receipts.after_produce",
        )
        assert proc.restart.keywords == {  # type: ignore[attr-defined]
            "limit": 5,
            "setting": "POS_RECEIPTS_MAX_RESTARTS_IN_PLACE",
        }
    finally:
        proc.watchdog.close()
        proc.consumer.close()
