"""The speed layer's Kafka source gets the timeouts that bound a broker's absence.

Without them Spark's driver waited on an admin call pinned to a dead leader until the
broker came back or Kafka's default.api.timeout.ms (60 s) passed: docs/cluster.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from pos_lambda.adapters import kafka
from pos_lambda.settings import Settings


class _Reader:
    """Spark's DataStreamReader as far as read_transactions uses it: records the options."""

    def __init__(self) -> None:
        self.source = ""
        self.seen: dict[str, str] = {}

    def format(self, source: str) -> _Reader:
        self.source = source
        return self

    def option(self, key: str, value: Any) -> _Reader:
        assert key not in self.seen, f"{key} set twice"
        self.seen[key] = str(value)
        return self

    def options(self, **opts: Any) -> _Reader:
        for key, value in opts.items():
            self.option(key, value)
        return self

    def load(self) -> _Reader:
        return self


class _Spark:
    def __init__(self) -> None:
        self.readStream = _Reader()  # Spark's name


def _source_options(settings: Settings) -> dict[str, str]:
    spark = _Spark()
    kafka.read_transactions(spark, settings)  # type: ignore[arg-type]
    assert spark.readStream.source == "kafka"
    return spark.readStream.seen


def test_the_source_gets_the_broker_absence_timeouts_by_default() -> None:
    opts = _source_options(Settings())
    assert opts["kafka.default.api.timeout.ms"] == "6000"
    assert opts["kafka.request.timeout.ms"] == "3000"
    assert opts["fetchOffset.numRetries"] == "30"
    assert opts["fetchOffset.retryIntervalMs"] == "250"
    # What was there before stays.
    assert opts["kafka.isolation.level"] == "read_committed"
    assert opts["kafka.fetch.max.wait.ms"] == "10"


def test_the_source_takes_them_from_the_settings() -> None:
    settings = Settings(
        speed_kafka_api_timeout_ms=8000,
        speed_kafka_request_timeout_ms=4000,
        speed_offset_fetch_retries=7,
        speed_offset_fetch_retry_interval_ms=100,
    )
    opts = _source_options(settings)
    assert opts["kafka.default.api.timeout.ms"] == "8000"
    assert opts["kafka.request.timeout.ms"] == "4000"
    assert opts["fetchOffset.numRetries"] == "7"
    assert opts["fetchOffset.retryIntervalMs"] == "100"


def test_an_api_timeout_below_the_request_timeout_is_refused() -> None:
    # Kafka's admin client would refuse it at the driver's first micro-batch.
    with pytest.raises(ValueError, match="speed_kafka_api_timeout_ms"):
        Settings(speed_kafka_api_timeout_ms=1000, speed_kafka_request_timeout_ms=2000)
