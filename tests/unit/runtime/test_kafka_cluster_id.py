"""The KRaft cluster id: Kafka's text form, and never one the storage tool misreads."""

from __future__ import annotations

import base64
import uuid

from pos_lambda_dev.runtime.kafka_service import new_cluster_id

# 0xF8 as the first byte encodes to "-" first in URL-safe base64.
DASH_FIRST = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))
PLAIN = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_an_id_is_22_characters_of_url_safe_base64_that_decode_to_the_16_bytes() -> None:
    cid = new_cluster_id(lambda: PLAIN)
    assert cid == "EjRWeBI0VngSNFZ4EjRWeA"
    assert base64.urlsafe_b64decode(cid + "==") == PLAIN.bytes


def test_an_id_starting_with_a_dash_is_drawn_again() -> None:
    draws = iter([DASH_FIRST, DASH_FIRST, PLAIN])
    assert base64.urlsafe_b64encode(DASH_FIRST.bytes).decode().startswith("-")
    assert new_cluster_id(lambda: next(draws)) == "EjRWeBI0VngSNFZ4EjRWeA"
