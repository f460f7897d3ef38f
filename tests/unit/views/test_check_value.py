"""The speed layer's per-record check never raises: bad input and validator bugs are data."""

from __future__ import annotations

import pytest

from pos_lambda.schemas import contract
from pos_lambda.views.records import _check_value


def test_empty_value_is_a_dead_letter() -> None:
    assert _check_value(None) == ("empty_value", "the Kafka record has no value", None)


def test_a_validator_bug_becomes_a_dead_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_: bytes) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(contract, "parse_message", broken)
    reason, detail, receipt = _check_value(b"{}")
    assert (reason, receipt) == ("internal_error", None)
    assert detail == "KeyError: 'boom'"
