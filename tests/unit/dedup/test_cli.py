"""`pos-receipts`: help, defaults and bad configuration (no Kafka)."""

from __future__ import annotations

import pytest

from pos_lambda.dedup import cli
from pos_lambda.dedup.processor import job
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
