"""The settings' sections: flat environment names in, nested sections out."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from pos_lambda.settings import SECTIONS, Settings, explain, load_settings, markdown_table


def test_environment_variables_keep_their_flat_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POS_KAFKA_PORT", "19092")
    monkeypatch.setenv("POS_TOPIC_TRANSACTIONS", "stores.receipts")
    monkeypatch.setenv("POS_SPEED_TRIGGER_SECONDS", "0.5")
    monkeypatch.setenv("POS_SPEED_CRASH_POINT", "after_raw_rows")
    s = load_settings()
    assert s.kafka.port == 19092
    assert s.topics.transactions == "stores.receipts"
    assert s.speed.trigger_seconds == 0.5
    assert s.faults.speed_crash_point == "after_raw_rows"
    assert s.bootstrap_servers == "127.0.0.1:19092"


def test_overrides_by_flat_name_keep_the_rest_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POS_CASSANDRA_KEYSPACE", "from_env")
    s = load_settings(cassandra_port=19042)
    assert (s.cassandra.port, s.cassandra.keyspace) == (19042, "from_env")
    t = s.with_overrides(cassandra_keyspace="other", serve_page_size=7)
    assert (t.cassandra.port, t.cassandra.keyspace, t.serve.page_size) == (19042, "other", 7)
    assert s.cassandra.keyspace == "from_env"  # frozen: the original is unchanged


def test_an_unknown_or_bad_name_is_refused_by_its_flat_name() -> None:
    with pytest.raises(ValidationError, match="unknown setting 'kafka_prot'"):
        load_settings(kafka_prot=1)
    with pytest.raises(ValidationError, match="unknown setting"):
        load_settings().with_overrides(speed_trigger=1)
    with pytest.raises(ValidationError) as bad:
        load_settings(serve_page_size=0)
    assert "POS_SERVE_PAGE_SIZE (serve_page_size)" in str(bad.value)


def test_a_bad_environment_value_is_explained_by_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POS_ALERTS_MODE", "twice")
    with pytest.raises(ValidationError) as bad:
        load_settings()
    assert explain(bad.value).startswith("POS_ALERTS_MODE (alerts_mode): Input should be")
    assert "(got 'twice')" in explain(bad.value)


def test_environment_rebuilds_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings(
        cassandra_username="pos",
        cassandra_password="s3cret",
        speed_trigger_seconds=1.5,
        batch_pause_before_commit=Path("/tmp/go"),
        topic_alerts="a.b",
    )
    env = s.environment()
    assert env["POS_CASSANDRA_PASSWORD"] == "s3cret"  # in clear, for the child only
    assert env["POS_BATCH_PAUSE_BEFORE_COMMIT"] == "/tmp/go"
    assert "POS_JAVA_HOME" not in env  # unset stays unset
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    again = Settings()
    assert again == s
    assert again.cassandra.password == SecretStr("s3cret")


def test_every_setting_is_described_in_the_table() -> None:
    table = markdown_table().splitlines()
    rows = [line for line in table[2:] if line.startswith("| ")]
    # Every variable once, in its row's variable column (settings that say the same
    # thing, the processors' common knobs, share a row).
    named = [v.strip(" `") for row in rows for v in row.split("|")[2].split(",")]
    assert (
        len(named)
        == len(set(named))
        == len(Settings.model_fields)
        - len(SECTIONS)
        + sum(len(type(getattr(load_settings(), name)).model_fields) for name in SECTIONS)
    )
    assert "| speed | `POS_SPEED_ARCHIVE_TRIGGER_SECONDS` | `30.0` |" in "\n".join(rows)
    assert (
        "| alerts, receipts | `POS_ALERTS_METRICS_PORT`, `POS_RECEIPTS_METRICS_PORT` | "
        "`9411`, `9412` |"
    ) in "\n".join(rows)
    undescribed = [row for row in rows if row.rstrip().endswith("|  |")]
    assert undescribed == []
