"""The oversized message the chaos run sends: its size, and the validator's verdict."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pos_lambda.producer import malformed
from pos_lambda.schemas.contract import LIMITS, Invalid, LineItem, Receipt, parse_message

LIKE = Receipt(
    datetime(2026, 3, 2, 9, 0, tzinfo=UTC), 101, 1001, 7, (LineItem("Tea", Decimal("1.90"), 2),)
)


@pytest.mark.parametrize("size", [LIMITS.max_message_bytes + 1, 300_000, 900_000])
def test_an_oversized_message_has_its_size_and_is_refused_as_too_large(size: int) -> None:
    kind, value, reason = malformed.oversized_message(LIKE, size)
    assert (kind, len(value), reason) == ("oversized_message", size, "too_large")
    assert {"operation_id", "transactions", "attachment"} <= set(json.loads(value))  # padded
    got = parse_message(value)
    assert isinstance(got, Invalid) and got.reason.split(":")[0] == "too_large"


def test_a_size_within_the_contract_is_refused() -> None:
    with pytest.raises(ValueError, match="not over the contract"):
        malformed.oversized_message(LIKE, LIMITS.max_message_bytes)
