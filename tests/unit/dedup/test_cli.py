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


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        assert done.value.code == 0
    assert "--instance-id" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({"POS_RECEIPTS_MODE": "twice"}, ["run"], "receipts_mode"),
        ({}, ["run", "--transaction-max-ms", "0"], "receipts_transaction_max_ms"),
        ({"POS_RECEIPTS_CRASH_POINT": "sometimes"}, ["run"], "receipts_crash_point"),
        ({}, ["run", "--instance-id", "a b"], "receipts_instance_id"),
    ],
)
def test_bad_configuration_exits_2_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    argv: list[str],
    says: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Nothing listens on port 1: a connection attempt would fail with another code.
    monkeypatch.setenv("POS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert cli.main(argv) == 2
    assert says in capsys.readouterr().err
