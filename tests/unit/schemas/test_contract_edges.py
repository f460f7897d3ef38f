"""The validator is one judge: edges found by hand and by Hypothesis.

Every input ends as exactly a Receipt or an Invalid with a known reason code; the
compiled (fast) and the reference JSON-Schema validators agree on every document.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pos_lambda.schemas import contract
from pos_lambda.schemas.contract import LIMITS, Invalid, Receipt, parse_message

GOOD: dict[str, Any] = {
    "happened_at": "2026-03-02T08:00:00+00:00",
    "operation_id": 1,
    "transaction_id": 42,
    "vendor_fiscal_module": 7,
    "transactions": [{"title": "Tea", "price": "1.50", "amount": 2}],
}


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def test_a_trailing_newline_fails_both_validators_with_the_same_reason() -> None:
    doc = {**GOOD, "happened_at": "2026-03-02T08:00:00Z\n"}
    assert not contract._VALIDATOR.is_valid(doc)
    assert parse_message(_encode(doc)).reason == "bad_timestamp"  # type: ignore[union-attr]
    price = {**GOOD, "transactions": [{"title": "Tea", "price": "1.50\n", "amount": 1}]}
    assert parse_message(_encode(price)).reason == "bad_price"  # type: ignore[union-attr]


def test_an_integer_of_thousands_of_digits_is_invalid_json_not_an_exception() -> None:
    result = parse_message(b'{"operation_id": ' + b"1" * 5000 + b"}")
    assert isinstance(result, Invalid) and result.reason == "invalid_json"


def test_nan_and_infinity_are_not_json() -> None:
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        message = _encode(GOOD).replace(b'"operation_id": 1', b'"operation_id": ' + constant)
        assert parse_message(message).reason == "invalid_json"  # type: ignore[union-attr]


def test_money_as_a_json_number_is_a_wrong_type() -> None:
    doc = {**GOOD, "transactions": [{"title": "Tea", "price": 1.5, "amount": 1}]}
    result = parse_message(_encode(doc))
    assert isinstance(result, Invalid) and result.reason == "wrong_type:transactions.0.price"


def test_a_lone_surrogate_in_a_title_is_an_encoding_error() -> None:
    # Valid JSON escapes, but no UTF-8 writer (Parquet, CQL) can store the string.
    message = _encode(GOOD).replace(b'"Tea"', b'"T\\ud800ea"')
    result = parse_message(message)
    assert isinstance(result, Invalid) and result.reason == "invalid_encoding"


def test_the_utc_instant_is_bounded_not_the_local_year() -> None:
    early = parse_message(_encode({**GOOD, "happened_at": "2000-01-01T00:30:00+01:00"}))
    assert isinstance(early, Invalid) and early.reason == "timestamp_out_of_range"
    late = parse_message(_encode({**GOOD, "happened_at": "2099-12-31T23:30:00-01:00"}))
    assert isinstance(late, Invalid) and late.reason == "timestamp_out_of_range"
    last = parse_message(_encode({**GOOD, "happened_at": "2099-12-31T23:59:59.999999Z"}))
    assert isinstance(last, Receipt)


# --- property-based: at, inside and just beyond every bound, and arbitrary input ---

ID32 = st.integers(-5, LIMITS.max_store_or_device_id + 5)
ID64 = st.integers(-5, LIMITS.max_transaction_id + 5)
EDGE_IDS = st.sampled_from(
    [0, 1, 2, LIMITS.max_store_or_device_id, LIMITS.max_store_or_device_id + 1]
)
AMOUNT = st.integers(-LIMITS.max_abs_amount - 2, LIMITS.max_abs_amount + 2)
PRICE = st.one_of(
    st.decimals(
        min_value=Decimal("-1"), max_value=Decimal(10) ** LIMITS.price_integer_digits, places=2
    ).map(str),
    st.sampled_from(["9999999999.99", "10000000000", "0", "0.00", "1.999", "-0.01", "1e3"]),
    st.text(max_size=14),
    st.floats(allow_nan=False),
)
TITLE = st.one_of(
    st.text(min_size=0, max_size=LIMITS.max_title_chars + 2),
    st.just("x" * LIMITS.max_title_chars),
)
TIMESTAMP = st.one_of(
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.sampled_from(
        [
            "2000-01-01T00:00:00Z",
            "1999-12-31T23:59:59Z",
            "2099-12-31T23:59:59.999999+00:00",
            "2100-01-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-03-02T08:00:00",
            "2026-03-02T08:00:00Z\n",
            "2026-03-02T08:00:00+14:00",
        ]
    ),
    st.text(max_size=40),
)
ITEM = st.fixed_dictionaries(
    {"title": TITLE, "price": PRICE, "amount": st.one_of(AMOUNT, st.just(0))}
)
DOC = st.fixed_dictionaries(
    {
        "happened_at": TIMESTAMP,
        "operation_id": st.one_of(ID32, EDGE_IDS),
        "transaction_id": ID64,
        "vendor_fiscal_module": st.one_of(ID32, EDGE_IDS),
        "transactions": st.one_of(
            st.lists(ITEM, min_size=0, max_size=4),
            st.integers(LIMITS.max_line_items - 1, LIMITS.max_line_items + 1).map(
                lambda n: [{"title": "x", "price": "9999999999.99", "amount": -10000}] * n
            ),
        ),
    }
)
KNOWN_CODES = set(contract.REASONS) - {"schema_violation", "internal_error", "empty_value"}


def _judge(doc: dict[str, Any]) -> None:
    try:
        contract._FAST_VALIDATE(doc)
        fast = True
    except contract.fastjsonschema.JsonSchemaException:
        fast = False
    assert fast == contract._VALIDATOR.is_valid(doc), doc


def test_validators_agree_on_a_faulty_simulated_stream() -> None:
    from datetime import UTC, datetime

    from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate

    config = SimulationConfig(
        count=2000, seed=3, start=datetime(2026, 3, 2, tzinfo=UTC),
        faults=FaultConfig(malformed_rate=0.3),
    )  # fmt: skip
    docs = []
    for m in simulate(config).messages:
        try:
            docs.append(json.loads(m.value))
        except ValueError:
            continue
    assert len(docs) > 2400
    for doc in docs:
        _judge(doc)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(DOC)
def test_validators_agree_and_every_document_is_a_receipt_or_a_known_reason(
    doc: dict[str, Any],
) -> None:
    _judge(doc)
    result = parse_message(json.dumps(doc).encode("utf-8", "surrogatepass"))
    assert isinstance(result, Receipt | Invalid)
    if isinstance(result, Invalid):
        assert contract.reason_code(result.reason) in KNOWN_CODES, result


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(value: bytes) -> None:
    result = parse_message(value)
    assert isinstance(result, Invalid)
    assert contract.reason_code(result.reason) in KNOWN_CODES


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=20))
def test_arbitrary_json_values_never_raise(value: Any) -> None:
    result = parse_message(json.dumps(value).encode("utf-8", "surrogatepass"))
    assert isinstance(result, Invalid)
