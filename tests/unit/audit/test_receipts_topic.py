"""The receipts topic's audit on literal records: how a record of `pos.receipts` is read
(its natural key and content, computed by the auditor), and how it is compared with the
ledger (every receipt once, the original's content, nothing else)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

from pos_lambda.audit.compare import keyed_rows
from pos_lambda.audit.expectations import TopicRow, fact
from pos_lambda.audit.readers import _topic_record

AT = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MESSAGE = json.dumps(
    {
        "happened_at": "2026-03-02T09:00:00+01:00",
        "operation_id": 101,
        "transaction_id": 42,
        "vendor_fiscal_module": 1001,
        "transactions": [
            {"title": "Espresso", "price": "1.90", "amount": 2},
            {"title": "Tea", "price": "2.50", "amount": -1},
        ],
    }
).encode()
ROW = TopicRow(AT, 1, Decimal("1.30"), 2)


def test_a_record_reads_as_its_natural_key_and_content() -> None:
    assert _topic_record(b"101:1001:42", MESSAGE) == ((101, 1001, 42), ROW)


def test_a_record_that_is_no_receipt_of_its_key_reads_as_nothing() -> None:
    for key, value in [
        (b"101:1001:43", MESSAGE),  # keyed as another receipt
        (None, MESSAGE),
        (b"101:1001:42", b"{oops"),
        (b"101:1001:42", None),
        (b"101:1001:42", b'{"operation_id": 101}'),
    ]:
        assert _topic_record(key, value) == (None, None), (key, value)


def test_the_ledger_row_of_a_receipt() -> None:
    line = {
        "operation_id": 101, "vendor_fiscal_module": 1001, "transaction_id": 42,
        "happened_at": "2026-03-02T08:00:00+00:00", "window_start": "2026-03-02T08:00:00+00:00",
        "item_quantity": 1, "revenue": "1.30", "line_count": 2,
        "first_sent_at": "2026-03-02T08:00:01+00:00", "late": False,
    }  # fmt: skip
    assert fact(line).topic_row() == ROW


def test_a_conflicting_copy_a_resend_and_a_stranger_are_each_caught() -> None:
    expected = {(101, 1001, 42): ROW, (101, 1001, 43): ROW}
    conflict = ROW._replace(item_quantity=2, revenue=Decimal("3.20"))
    tally = keyed_rows(
        expected,
        [
            ((101, 1001, 42), conflict),  # the conflicting copy instead of the original
            ((101, 1001, 42), ROW),  # and the original too
            ((101, 1001, 44), ROW),  # a receipt the ledger does not know
        ],
    )
    assert (tally.lost, tally.duplicated, tally.wrong) == (1, 1, 2)
