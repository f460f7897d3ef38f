"""What a copy of a receipt says, and its hash: one definition (pure Python).

Two copies of one natural key are a *resend* when their content hashes are equal and a
*conflict* when not. The speed and batch layers hash in Spark
(`pos_lambda.views.records.content_hash`) and store the hash with every raw receipt;
the alerts processor hashes in Python (`content_hash` below) for its conflict alerts.
Both must agree, so the hashed text is spelled out here and
tests/unit/views/test_content.py runs both over the same raw messages.

The content is the instant and the typed line items: "1.9" and "1.90", or one instant
written with two offsets, are the same content. The hashed text is SHA-256 (hex) of
the UTF-8 JSON Spark's `to_json` writes for
`struct(unix_micros(happened_at) AS col1, line_items AS line_items)`:

    {"col1":1772438400000000,"line_items":[{"title":"Espresso","price":1.90,"amount":2}]}

- no whitespace; keys in this order; item keys in the receipt schema's order;
- `col1`: microseconds since the epoch (the name Spark gave the unnamed field when the
  first hashes were stored; kept so that stored hashes stay valid);
- `price`: a JSON number with exactly two decimals (the receipt's decimal(12,2));
- `title`: a JSON string, non-ASCII as is, escaped as Jackson escapes (`\\"`, `\\\\`,
  `\\b \\f \\n \\r \\t`, other control characters as `\\u00XX` with upper-case hex).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from pos_lambda.schemas.contract import LINE_ITEMS_COLUMN, LineItem
from pos_lambda.views.windows import EPOCH

INSTANT_FIELD = "col1"
ITEMS_FIELD = LINE_ITEMS_COLUMN
_CENT = Decimal("0.01")
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                  "\t": "\\t"}  # fmt: skip
_TO_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def _json_string(text: str) -> str:
    return '"' + _TO_ESCAPE.sub(_escape, text) + '"'


def content_text(happened_at: datetime, line_items: Iterable[LineItem]) -> str:
    """The canonical text of a copy's content (see the module's docstring)."""
    micros = (happened_at - EPOCH) // timedelta(microseconds=1)
    items = ",".join(
        f'{{"title":{_json_string(i.title)},"price":{i.price.quantize(_CENT)},'
        f'"amount":{int(i.amount)}}}'
        for i in line_items
    )
    return f'{{"{INSTANT_FIELD}":{micros},"{ITEMS_FIELD}":[{items}]}}'


def content_hash(happened_at: datetime, line_items: Iterable[LineItem]) -> str:
    """SHA-256 (hex) of `content_text`: equal for resends, different for conflicts."""
    return hashlib.sha256(content_text(happened_at, line_items).encode()).hexdigest()
