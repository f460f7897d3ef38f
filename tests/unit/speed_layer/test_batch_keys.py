"""A micro-batch's collected keys: counts and the stored rows' keys, each once."""

from __future__ import annotations

from datetime import date

from pos_lambda.speed_layer.batch_plan import BatchKeys, batch_keys

MAR_2, MAR_3 = date(2026, 3, 2), date(2026, 3, 3)


def test_keys_of_valid_records_each_once_and_invalid_ones_counted() -> None:
    rows = [
        # valid, operation_id, vendor_fiscal_module, key_bucket, transaction_id, day
        (True, 5, 1, 0, 100, MAR_2),
        (True, 5, 1, 0, 100, MAR_3),  # a resend whose time moved it to the next day
        (True, 5, 1, 1, 1000, MAR_3),
        (True, 6, 2, 0, 7, MAR_2),
        (False, None, None, None, None, None),
        (False, None, None, None, None, None),
    ]
    assert batch_keys(rows) == BatchKeys(
        valid_rows=4,
        invalid_rows=2,
        receipts=((5, 1, 0, 100), (5, 1, 1, 1000), (6, 2, 0, 7)),
        store_days=((5, MAR_2), (5, MAR_3), (6, MAR_2)),
        buckets=3,
    )


def test_a_micro_batch_of_dead_letters_has_no_keys() -> None:
    rows = [(False, None, None, None, None, None)]
    assert batch_keys(rows) == BatchKeys(0, 1, (), (), 0)
