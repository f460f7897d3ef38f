"""Malformed messages of the kinds real stores send, each with the reason the
contract's validator must give (the ledger records it; tests check it).

Kinds: broken_json (truncated), missing_field, wrong_type, negative_price,
oversized_list (one line item more than the contract allows).
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
