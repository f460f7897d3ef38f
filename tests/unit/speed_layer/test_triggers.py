"""Each query's trigger interval comes from its own setting (no Spark needed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from pos_lambda.settings import load_settings
from pos_lambda.speed_layer.triggers import with_trigger


class Writer:
    """Records what DataStreamWriter.trigger was given (pure: no session)."""

    def __init__(self) -> None:
        self.given: dict[str, Any] = {}

    def trigger(self, **kwargs: Any) -> Writer:
        self.given = kwargs
        return self


def test_the_archiver_has_its_own_longer_interval_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POS_SPEED_ARCHIVE_TRIGGER_SECONDS", raising=False)
    monkeypatch.delenv("POS_SPEED_TRIGGER_SECONDS", raising=False)
    s = load_settings()
    assert (s.speed.trigger_seconds, s.speed.archive_trigger_seconds) == (1.0, 30.0)
    monkeypatch.setenv("POS_SPEED_ARCHIVE_TRIGGER_SECONDS", "2.5")
    assert load_settings().speed.archive_trigger_seconds == 2.5
    with pytest.raises(ValidationError, match="speed_archive_trigger_seconds"):
        load_settings(speed_archive_trigger_seconds=0)


def test_with_trigger_gives_the_interval_or_available_now() -> None:
    w = Writer()
    assert with_trigger(w, 30.0, available_now=False) is w  # type: ignore[arg-type]
    assert w.given == {"processingTime": "30.0 seconds"}
    with_trigger(w, 30.0, available_now=True)  # type: ignore[arg-type]
    assert w.given == {"availableNow": True}
