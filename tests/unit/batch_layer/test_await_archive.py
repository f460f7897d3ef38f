"""await_archive's rules that need no Kafka: the run's settings, the in-flight wait."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pos_lambda.batch_layer.await_archive import IN_FLIGHT, archived_before, settings_with


def test_a_runs_pos_env_overrides_the_settings_by_their_env_names() -> None:
    settings = settings_with({"POS_TOPIC_TRANSACTIONS": "t.other", "POS_SPEED_ARCHIVER_GROUP": "g"})
    assert settings.topics.transactions == "t.other"
    assert settings.speed.archiver_group == "g"
    assert settings_with(None).speed.archiver_group == "pos-archiver"


def test_a_pos_env_name_that_is_no_setting_is_refused_with_what_to_write() -> None:
    with pytest.raises(ValueError, match="'TOPIC' is not a POS_\\* setting"):
        settings_with({"TOPIC": "x"})


def test_records_sent_just_before_the_end_are_given_time_to_reach_kafka() -> None:
    end = datetime(2026, 3, 2, 9, tzinfo=UTC)
    # Before end + IN_FLIGHT the answer is "not yet", without asking Kafka (the
    # bootstrap server here does not exist: asking would fail).
    unreachable = {"POS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    assert IN_FLIGHT.total_seconds() == 30
    assert archived_before(end.isoformat(), unreachable, now=end + IN_FLIGHT / 2) is False
