"""The native path accepts only what the contract's validator accepts, with the same receipt.

The reference is the validator itself, run in this process (`records._check_value`,
the very function the Python path runs) on each message, its outputs typed by Spark
from Python values; the code under test is `records.check`, which sends to Python
only what the native path does not accept. Every message below, hostile or generated,
must get the same reason, detail and receipt both ways. Where the native path is
expected to accept, the test says so too: a native path that accepted nothing would
agree with the reference as well.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType
from pyspark.testing import assertDataFrameEqual

from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.schemas.contract import LIMITS
from pos_lambda.views import records
from pos_lambda.views.native_check import with_native_receipt

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)
AT = datetime(2026, 3, 2, 9, tzinfo=UTC)
GOOD: dict[str, Any] = {
    "happened_at": "2026-03-02T09:00:00.5+01:00",
    "operation_id": 1,
    "transaction_id": 2,
    "vendor_fiscal_module": 3,
    "transactions": [{"title": "Tea", "price": "1.5", "amount": 2}],
}


def _compact(doc: Any, ascii_only: bool = True) -> bytes:
    """As the producer writes a message: no whitespace, fields in contract order."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=ascii_only).encode(
        "utf-8", "surrogatepass"
    )


def _with(**changes: Any) -> bytes:
    return _compact({**GOOD, **changes})


def _item(**changes: Any) -> bytes:
    return _with(transactions=[{**GOOD["transactions"][0], **changes}])


def _kafka(spark: Any, values: list[bytes | None]) -> Any:
    rows = [(None, v, "t", 0, n, AT) for n, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_DDL)


def _assert_same_as_the_validator(spark: Any, values: list[bytes | None]) -> int:
    """records.check == the validator on every value; returns how many the native path took."""
    kafka = _kafka(spark, values)
    checked = records.check(kafka, native_first=True)
    got = checked.select("kafka_offset", "reason", "detail", "receipt")
    reference = [(n, *records._check_value(v)) for n, v in enumerate(values)]
    schema = StructType([StructField("kafka_offset", LongType()), *records.CHECK_TYPE.fields])
    expected = spark.createDataFrame(reference, schema)
    assertDataFrameEqual(got, expected)
    return with_native_receipt(kafka, "n").where(F.col("n").isNotNull()).count()


def test_canonical_valid_messages_take_the_native_path_with_the_validators_receipt(
    local_spark: Any,
) -> None:
    worst_items = [{"title": "x" * LIMITS.max_title_chars, "price": "9999999999.99",
                    "amount": -LIMITS.max_abs_amount}] * LIMITS.max_line_items  # fmt: skip
    valid = [
        _compact(GOOD),
        _with(happened_at="2099-12-31T23:59:59.999999Z", transactions=worst_items),
        _with(happened_at="2000-01-01T00:00:00Z"),
        _with(happened_at="2024-02-29T23:59:59-17:59"),  # a leap day, the widest offset
        _with(happened_at="2026-03-29T02:30:00+02:00"),  # a local time a DST gap skips
        _with(operation_id=LIMITS.max_store_or_device_id, transaction_id=LIMITS.max_transaction_id),
        _item(price="0.1", amount=3),  # 0.30 exactly, no binary float on either path
        _item(price="01.50"),
        _item(price="0"),
        _compact(  # 200 code points, as raw UTF-8
            {
                **GOOD,
                "transactions": [{**GOOD["transactions"][0], "title": "Café 🍵 " + "é" * 192}],
            },
            ascii_only=False,
        ),
        _item(title='tab\there, quote " and backslash \\'),
        _item(title="bell\u0007"),  # written "\u0007" by both JSON writers
    ]
    assert _assert_same_as_the_validator(local_spark, valid) == len(valid)


# Each one is either invalid (the validator names why) or valid but not canonical (the
# validator takes it); the native path must leave every one of them to the validator.
NOT_FOR_THE_NATIVE_PATH = [
    None,
    b"",
    b"{",
    b"[]",
    b"null",
    b'"text"',
    json.dumps(GOOD).encode(),  # valid, with whitespace
    _compact(GOOD) + b" ",
    b"\xef\xbb\xbf" + _compact(GOOD),  # a byte-order mark
    _compact({**GOOD, "cashier": "Ann"}),  # valid: v1 ignores unknown fields
    _compact({k: GOOD[k] for k in reversed(GOOD)}),  # valid, fields in another order
    _compact(GOOD)[:-1] + b',"operation_id":9}',  # a duplicate key
    _compact(GOOD).replace(b'"operation_id":1', b'"operation_id":1.0'),
    _compact(GOOD).replace(b'"operation_id":1', b'"operation_id":1e0'),
    _compact(GOOD).replace(b'"operation_id":1', b'"operation_id":-0'),
    _compact(GOOD).replace(b'"operation_id":1', b'"operation_id":NaN'),
    _with(operation_id="1"),
    _with(operation_id=0),
    _with(operation_id=LIMITS.max_store_or_device_id + 1),
    _with(transaction_id=2**63),
    _with(transaction_id=2**64 + 2),
    _with(vendor_fiscal_module=None),
    _compact({k: v for k, v in GOOD.items() if k != "transaction_id"}),
    _with(happened_at="2026-02-29T09:00:00Z"),  # no such day
    _with(happened_at="2026-04-31T09:00:00Z"),
    _with(happened_at="2026-03-02T24:00:00Z"),
    _with(happened_at="2026-03-02T23:59:60Z"),  # a leap second
    _with(happened_at="2026-03-02T09:00:00Z\n"),
    _with(happened_at="2026-03-02T09:00:00"),  # no offset
    _with(happened_at="2026-03-02 09:00:00Z"),
    _with(happened_at="2026-03-02T09:00:00.1234567Z"),
    _with(happened_at="2026-03-02T09:00:00+18:00"),  # valid: Python takes it, Java's limit
    _with(happened_at="2026-03-02T09:00:00+23:59"),
    _with(happened_at="2026-03-02T09:00:00+24:00"),
    _with(happened_at="2000-01-01T00:30:00+01:00"),  # 1999 in UTC
    _with(happened_at="2099-12-31T23:30:00-01:00"),  # 2100 in UTC
    _with(happened_at="1999-12-31T23:59:59Z"),
    _with(happened_at=20260302),
    _with(transactions=[]),
    _with(transactions=None),
    _with(transactions=[None]),
    _with(transactions=GOOD["transactions"] * (LIMITS.max_line_items + 1)),
    _with(transactions={"title": "Tea"}),
    _item(title=""),
    _item(title="x" * (LIMITS.max_title_chars + 1)),
    _item(title=None),
    _item(title=7),
    _item(title="Caf\u00e9"),  # valid, but written as "Caf\\u00e9" (ensure_ascii)
    _item(title="T\ud800ea"),  # a lone surrogate
    _compact(GOOD).replace(b"Tea", b"T\xffa"),  # not UTF-8
    _item(price="-1.5"),
    _item(price="1.505"),
    _item(price="1."),
    _item(price=".5"),
    _item(price="10000000000"),
    _item(price="1.5\n"),
    _item(price=1.5),
    _item(amount=0),
    _item(amount=LIMITS.max_abs_amount + 1),
    _item(amount=-LIMITS.max_abs_amount - 1),
    _item(amount=1.5),
    _compact({**GOOD, "transactions": [{"title": "Tea", "amount": 2}]}),
    _compact({**GOOD, "transactions": [{"price": "1.5", "title": "Tea", "amount": 2}]}),
    _compact({**GOOD, "pad": "x" * LIMITS.max_message_bytes}),  # too large
]


def test_whatever_is_not_canonical_and_valid_is_left_to_the_validator(local_spark: Any) -> None:
    assert _assert_same_as_the_validator(local_spark, NOT_FOR_THE_NATIVE_PATH) == 0


def test_the_producers_messages_take_the_native_path(local_spark: Any) -> None:
    faults = FaultConfig(resend_rate=0.05, late_rate=0.05, malformed_rate=0.05)
    simulated = simulate(SimulationConfig(300, seed=11, start=AT, faults=faults))
    values = [m.value for m in simulated.messages]
    malformed = sum(m.kind.startswith("malformed") for m in simulated.messages)
    assert malformed > 0
    assert _assert_same_as_the_validator(local_spark, values) == len(values) - malformed


TIMESTAMPS = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}{}{}".format,
    st.sampled_from([1999, 2000, 2024, 2026, 2099, 2100]),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 60),
    st.sampled_from(["", ".5", ".123456", ".1234567"]),
    st.sampled_from(["Z", "+00:00", "-00:00", "+01:00", "-17:59", "+18:00", "+25:00", ""]),
)
ITEMS = st.lists(
    st.fixed_dictionaries(
        {
            "title": st.text(max_size=LIMITS.max_title_chars + 1),
            "price": st.one_of(
                st.decimals(min_value=0, max_value=Decimal("9999999999.99"), places=2).map(str),
                st.sampled_from(["-0.01", "1.001", "1e3", "", "00.10"]),
            ),
            "amount": st.integers(-LIMITS.max_abs_amount - 1, LIMITS.max_abs_amount + 1),
        }
    ),
    max_size=3,
)
CANONICAL = st.builds(
    lambda ts, ids, items, ascii_only: _compact(
        {"happened_at": ts, **ids, "transactions": items}, ascii_only
    ),
    st.one_of(TIMESTAMPS, st.just(GOOD["happened_at"])),
    st.fixed_dictionaries(
        {
            name: st.integers(-1, high + 1)
            for name, high in (
                ("operation_id", LIMITS.max_store_or_device_id),
                ("transaction_id", LIMITS.max_transaction_id),
                ("vendor_fiscal_module", LIMITS.max_store_or_device_id),
            )
        }
    ),
    ITEMS,
    st.booleans(),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CANONICAL, min_size=1, max_size=60))
def test_generated_canonical_messages_get_the_validators_verdict(
    local_spark: Any, values: list[bytes]
) -> None:
    _assert_same_as_the_validator(local_spark, list(values))
