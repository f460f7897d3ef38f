"""Malformed messages of the kinds real stores send, each with the reason the
contract's validator must give (the ledger records it; tests check it).

Kinds: broken_json (truncated), missing_field, wrong_type, negative_price,
oversized_list (one line item more than the contract allows). Beside them, never drawn
at random: `oversized_message`, a receipt padded past the contract's message size (the
chaos run sends a few, up to Kafka's own limit).
"""

from __future__ import annotations

import json
import random
from typing import Any

from pos_lambda.schemas.contract import LIMITS, Receipt

KINDS = ("broken_json", "missing_field", "wrong_type", "negative_price", "oversized_list")


def make(rng: random.Random, like: Receipt) -> tuple[str, bytes, str]:
    """(kind, message bytes, expected reason) for a malformed copy of `like`."""
    kind = rng.choice(KINDS)
    doc: dict[str, Any] = like.to_json()
    if kind == "broken_json":
        text = json.dumps(doc)
        return kind, text[: rng.randint(1, len(text) - 1)].encode(), "invalid_json"
    if kind == "missing_field":
        name = rng.choice(
            [
                "happened_at",
                "operation_id",
                "transaction_id",
                "vendor_fiscal_module",
                "transactions",
            ]
        )
        del doc[name]
        return kind, json.dumps(doc).encode(), f"missing_field:{name}"
    if kind == "wrong_type":
        # The mistakes seen from real terminals: ids as strings, money as a JSON
        # number (a float: exactly what the contract forbids), fractional quantities.
        item = doc["transactions"][0]
        field, path = rng.choice(
            [
                ("operation_id", "operation_id"),
                ("price", "transactions.0.price"),
                ("amount", "transactions.0.amount"),
            ]
        )
        if field == "operation_id":
            doc["operation_id"] = str(doc["operation_id"])
        elif field == "price":
            item["price"] = float(item["price"])
        else:
            item["amount"] = item["amount"] + 0.5
        return kind, json.dumps(doc).encode(), f"wrong_type:{path}"
    if kind == "negative_price":
        doc["transactions"][0]["price"] = "-" + doc["transactions"][0]["price"]
        return kind, json.dumps(doc).encode(), "negative_price"
    item = doc["transactions"][0]
    doc["transactions"] = [item] * (LIMITS.max_line_items + 1)
    return kind, json.dumps(doc).encode(), "too_many_items"


OVERSIZED = "oversized_message"


def oversized_message(like: Receipt, size: int) -> tuple[str, bytes, str]:
    """(kind, message bytes, expected reason) for `like` padded with an unknown field to
    exactly `size` bytes, which must exceed the contract's LIMITS.max_message_bytes: a
    terminal that attaches a log or an image to its receipt."""
    if size <= LIMITS.max_message_bytes:
        raise ValueError(f"{size} bytes is not over the contract's {LIMITS.max_message_bytes}")
    head = json.dumps(like.to_json())[:-1] + ', "attachment": "'
    tail = '"}'
    pad = size - len(head.encode()) - len(tail)
    return OVERSIZED, (head + "x" * pad + tail).encode(), "too_large"
