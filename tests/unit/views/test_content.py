"""The content hash: Spark's column (speed and batch layers) and Python's (alerts) agree.

The same raw messages go through the stream's own transform (`records.check`, then
`records.receipt_rows`) in local Spark and through `parse_message` + `content_hash` in
Python. The expected hashes are literals: SHA-256 of the canonical text written out
below, and the values Spark stored before the definition moved to
`pos_lambda.views.content` (stored hashes must stay valid).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda.views import records
from pos_lambda.views.content import content_hash, content_text

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)
ITEMS = [
    {"title": "Espresso", "price": "1.90", "amount": 2},
    {"title": "x", "price": "9999999999.99", "amount": -3},  # the largest price, a return
    {"title": "z", "price": "0", "amount": 1},
]
CANONICAL = (
    '{"col1":1772438400123456,"line_items":['
    '{"title":"Espresso","price":1.90,"amount":2},'
    '{"title":"x","price":9999999999.99,"amount":-3},'
    '{"title":"z","price":0.00,"amount":1}]}'
)
# Spark's hash of CANONICAL's receipt, as the speed layer stored it before this module.
PINNED = "7e9693d93ce97a8f342ea265073a862f538e6a39af93194402267c9173d60280"
UNICODE_TITLE = 'Café "crème" \\ / ☕ 𝄞'
CONTROL_TITLE = "tab\there\nnl\x01\x1f\x7f\u2028"


def _message(tid: int, happened_at: str, items: list[dict[str, Any]], **more: Any) -> bytes:
    doc = {"happened_at": happened_at, "operation_id": 1, "transaction_id": tid,
           "vendor_fiscal_module": 7, "transactions": items, **more}  # fmt: skip
    return json.dumps(doc).encode()


def _with_title(title: str) -> list[dict[str, Any]]:
    return [{**ITEMS[0], "title": title}, *ITEMS[1:]]


# transaction id -> message; the ids name the expectation below.
MESSAGES = {
    1: _message(1, "2026-03-02T08:00:00.123456Z", ITEMS),
    # trailing zeros dropped / added: the same typed prices
    2: _message(2, "2026-03-02T08:00:00.123456Z", [{**ITEMS[0], "price": "1.9"},
                                                  *ITEMS[1:2], {**ITEMS[2], "price": "0.00"}]),
    3: _message(3, "2026-03-02T09:00:00.123456+01:00", ITEMS),  # another offset
    # fields v1 does not know, some null: ignored
    4: _message(4, "2026-03-02T08:00:00.123456Z", [{**ITEMS[0], "sku": None}, *ITEMS[1:]],
                note=None, cashier="Eva"),
    5: _message(5, "2026-03-02T08:00:00.123456Z", _with_title(UNICODE_TITLE)),
    6: _message(6, "2026-03-02T08:00:00.123456Z", _with_title(CONTROL_TITLE)),
    7: _message(7, "2026-03-02T08:00:00.123457Z", ITEMS),  # one microsecond later
    8: _message(8, "2026-03-02T08:00:00.123456Z", [{**ITEMS[0], "amount": -2}, *ITEMS[1:]]),
}  # fmt: skip
EXPECTED = {
    1: PINNED,
    2: PINNED,
    3: PINNED,
    4: PINNED,
    # As stored by the speed layer before this module, like PINNED.
    5: "17c95fe6c95be616f33e1f4310ab801a5b91550b4604c4ed951cac1f05a20757",
    6: "e74050996e23940209b55d762d0aba1878572938ebbb0e52f13d1909f34c402f",
}


def _python_hashes() -> dict[int, str]:
    out = {}
    for tid, value in MESSAGES.items():
        receipt = parse_message(value)
        assert isinstance(receipt, Receipt), receipt
        out[tid] = content_hash(receipt.happened_at, receipt.line_items)
    return out


def test_the_pinned_hash_is_the_canonical_text() -> None:
    assert hashlib.sha256(CANONICAL.encode()).hexdigest() == PINNED
    receipt = parse_message(MESSAGES[1])
    assert isinstance(receipt, Receipt)
    assert content_text(receipt.happened_at, receipt.line_items) == CANONICAL


def test_titles_are_escaped_as_spark_writes_them() -> None:
    receipt = parse_message(MESSAGES[6])
    assert isinstance(receipt, Receipt)
    text = content_text(receipt.happened_at, receipt.line_items)
    assert '"title":"tab\\there\\nnl\\u0001\\u001F\x7f\u2028"' in text  # upper-case hex
    receipt = parse_message(MESSAGES[5])
    assert isinstance(receipt, Receipt)
    text = content_text(receipt.happened_at, receipt.line_items)
    assert '"title":"Café \\"crème\\" \\\\ / ☕ 𝄞"' in text  # non-ASCII as is


def test_python_hashes_resends_alike_and_conflicts_apart() -> None:
    got = _python_hashes()
    assert {tid: got[tid] for tid in EXPECTED} == EXPECTED
    assert len({got[1], got[7], got[8]}) == 3  # an instant or a quantity apart: conflicts


def test_spark_content_hash_equals_python_on_the_same_messages(local_spark: Any) -> None:
    at = datetime(2026, 3, 2, 9, tzinfo=UTC)
    kafka = local_spark.createDataFrame(
        [(None, value, "t", 0, tid, at) for tid, value in MESSAGES.items()], KAFKA_DDL
    )
    rows = records.receipt_rows(records.check(kafka), 900 * 10**6, 48 * 3600 * 10**6)
    spark = {r.transaction_id: r.content_hash for r in rows.collect()}
    assert {tid: spark[tid] for tid in EXPECTED} == EXPECTED
    assert spark == _python_hashes()
