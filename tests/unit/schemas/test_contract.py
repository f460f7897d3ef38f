"""The contract: one source, three representations that agree, the Python types that
match them (tested once, here), and a strict validator."""

from __future__ import annotations

import json
from dataclasses import fields
from decimal import Decimal
from typing import Any

import pytest

from pos_lambda.schemas import contract, cql
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.schemas.contract import Invalid, LineItem, Receipt, parse_message
from pos_lambda.serving.receipt_status import ReceiptKey
from pos_lambda.views.aggregation import AGGREGATE_COLUMNS, MEASURE_TYPES

GOOD: dict[str, Any] = {
    "happened_at": "2017-09-19T22:48:03+02:00",
    "operation_id": 1,
    "transaction_id": 42,
    "vendor_fiscal_module": 123,
    "transactions": [
        {"title": "Espresso", "price": "1.90", "amount": 2},
        {"title": "Croissant", "price": "1.2", "amount": -1},
    ],
}


def _msg(**changes: Any) -> bytes:
    doc = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if v is None:
            del doc[k]
        else:
            doc[k] = v
    return json.dumps(doc).encode()


def test_committed_json_schema_is_the_generated_one() -> None:
    assert json.loads(contract.SCHEMA_FILE.read_text()) == contract.json_schema()


def test_json_schema_spark_and_cql_name_the_same_fields() -> None:
    schema = contract.json_schema()
    json_fields = set(schema["properties"])
    message = contract.spark_message_schema()
    assert {f.name for f in message.fields} == json_fields
    items = schema["properties"]["transactions"]["items"]["properties"]
    assert set(items) == {"title", "price", "amount"}
    receipt_cols = {f.name for f in contract.spark_receipt_schema().fields}
    cql_cols = dict(contract.cql_receipt_columns())
    # JSON's "transactions" is stored as line_items; everything else keeps its name.
    renamed = {"line_items" if n == "transactions" else n for n in json_fields}
    assert set(cql_cols) == renamed
    assert renamed <= receipt_cols
    assert receipt_cols - renamed == {"item_quantity", "revenue"}


# Value ranges of the target types, written out here (not taken from the contract).
SPARK_RANGES = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1)}
CQL_RANGES = {"int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1), "decimal": None}


def _integer_bounds(schema: dict[str, Any]) -> dict[str, tuple[int, int]]:
    props = schema["properties"]
    items = props["transactions"]["items"]["properties"]
    return {
        name: (spec["minimum"], spec["maximum"])
        for name, spec in [*props.items(), *items.items()]
        if spec.get("type") == "integer"
    }


def test_every_integer_the_json_schema_admits_fits_the_spark_and_cql_types() -> None:
    schema = contract.json_schema()
    bounds = _integer_bounds(schema)
    assert set(bounds) == {"operation_id", "transaction_id", "vendor_fiscal_module", "amount"}
    message = contract.spark_message_schema()
    receipt = contract.spark_receipt_schema()
    item_msg = message["transactions"].dataType.elementType
    item_rec = receipt["line_items"].dataType.elementType
    cql = {**dict(contract.cql_receipt_columns()), **dict(contract.cql_line_item_type()[1])}
    for name, (low, high) in bounds.items():
        nested = name == "amount"
        for struct in (item_msg, item_rec) if nested else (message, receipt):
            lo, hi = SPARK_RANGES[struct[name].dataType.simpleString()]
            assert lo <= low and high <= hi, (name, struct[name])
        lo, hi = CQL_RANGES[cql[name]]  # type: ignore[misc]
        assert lo <= low and high <= hi, name


def test_raw_message_types_keep_strings_for_validation() -> None:
    message = contract.spark_message_schema()
    assert message.simpleString() == (
        "struct<happened_at:string,operation_id:bigint,transaction_id:bigint,"
        "vendor_fiscal_module:bigint,"
        "transactions:array<struct<title:string,price:string,amount:bigint>>>"
    )
    assert message.simpleString() == contract.spark_message_ddl()
    assert contract.spark_receipt_schema().simpleString() == contract.spark_receipt_ddl()
    # Every JSON string is a Spark string; every JSON integer a Spark bigint.
    json_to_spark = {"string": "string", "integer": "bigint"}
    props = contract.json_schema()["properties"]
    for f in message.fields:
        if f.name != "transactions":
            assert json_to_spark[props[f.name]["type"]] == f.dataType.simpleString()


def test_types_agree_across_representations() -> None:
    receipt = {f.name: f.dataType.simpleString() for f in contract.spark_receipt_schema().fields}
    cql = dict(contract.cql_receipt_columns())
    spark_to_cql = {"int": "int", "bigint": "bigint", "timestamp": "timestamp"}
    for name in ("operation_id", "transaction_id", "vendor_fiscal_module", "happened_at"):
        assert spark_to_cql[receipt[name]] == cql[name], name
    udt_name, udt = contract.cql_line_item_type()
    assert cql["line_items"] == f"list<frozen<{udt_name}>>"
    assert dict(udt) == {"title": "text", "price": "decimal", "amount": "int"}
    assert receipt["line_items"] == "array<struct<title:string,price:decimal(12,2),amount:int>>"
    props = contract.json_schema()["properties"]
    assert props["operation_id"]["type"] == "integer"
    assert props["happened_at"]["type"] == "string"


def test_a_good_message_parses_to_utc_with_decimal_money() -> None:
    r = parse_message(_msg())
    assert isinstance(r, Receipt)
    assert r.happened_at.isoformat() == "2017-09-19T20:48:03+00:00"
    assert r.natural_key == (1, 123, 42)
    assert r.item_quantity == 1
    assert r.revenue == Decimal("2.60")  # 2 x 1.90 - 1 x 1.2


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "invalid_json"),
        (b"\xff\xfe", "invalid_encoding"),
        (b"[1, 2]", "not_an_object"),
        (_msg(transaction_id=None), "missing_field:transaction_id"),
        (_msg(operation_id="1"), "wrong_type:operation_id"),
        (_msg(operation_id=0), "out_of_range:operation_id"),
        (_msg(operation_id=True), "wrong_type:operation_id"),
        (_msg(operation_id=2**31), "out_of_range:operation_id"),
        (_msg(happened_at="2017-09-19T22:48:03"), "bad_timestamp"),  # no offset
        (_msg(happened_at="2017-09-19 22:48:03+00:00"), "bad_timestamp"),  # no "T"
        (_msg(happened_at="yesterday"), "bad_timestamp"),
        (_msg(happened_at="2017-02-30T10:00:00Z"), "bad_timestamp"),  # no such day
        (_msg(happened_at="2017-09-19T24:00:00Z"), "bad_timestamp"),
        (_msg(happened_at=1505861283), "wrong_type:happened_at"),
        (_msg(happened_at="1999-12-31T23:59:59Z"), "timestamp_out_of_range"),
        (_msg(happened_at="2100-01-01T00:00:00Z"), "timestamp_out_of_range"),
        # Local years inside the range, UTC instants outside it.
        (_msg(happened_at="2000-01-01T00:30:00+01:00"), "timestamp_out_of_range"),
        (_msg(happened_at="2099-12-31T23:30:00-01:00"), "timestamp_out_of_range"),
        (_msg(transactions=[]), "no_items"),
        (_msg(transactions=[{"title": "x", "price": "1.00", "amount": 1}] * 201), "too_many_items"),
        (_msg(transactions=[{"title": "x", "price": "-1.00", "amount": 1}]), "negative_price"),
        (_msg(transactions=[{"title": "x", "price": "1.005", "amount": 1}]), "bad_price"),
        (
            _msg(transactions=[{"title": "x", "price": 1.5, "amount": 1}]),
            "wrong_type:transactions.0.price",
        ),
        (_msg(transactions=[{"title": "x", "price": "1.00", "amount": 0}]), "zero_amount"),
        (
            _msg(transactions=[{"title": "", "price": "1.00", "amount": 1}]),
            "bad_length:transactions.0.title",
        ),
        (_msg(transactions=[{"title": "x", "amount": 1}]), "missing_field:transactions.0.price"),
        (
            _msg(transactions=[{"title": "x", "price": "1.00", "amount": 1.5}]),
            "wrong_type:transactions.0.amount",
        ),
        (
            _msg(transactions=[{"title": "x", "price": "1.00", "amount": 10001}]),
            "out_of_range:transactions.0.amount",
        ),
        (
            _msg(transactions=[{"title": "x" * 201, "price": "1.00", "amount": 1}]),
            "bad_length:transactions.0.title",
        ),
        (_msg(transactions=[{"title": "x", "price": "12345678901", "amount": 1}]), "bad_price"),
        (_msg(transactions=[{"title": "x", "price": "1e3", "amount": 1}]), "bad_price"),
        (_msg(transactions="Espresso"), "wrong_type:transactions"),
        (_msg(transaction_id=2**63), "out_of_range:transaction_id"),
        (b"null", "not_an_object"),
        (b"{" + b" " * 70000 + b"}", "too_large"),
    ],
)
def test_bad_messages_get_a_reason(value: bytes, reason: str) -> None:
    result = parse_message(value)
    assert isinstance(result, Invalid)
    assert result.reason == reason
    assert contract.reason_code(result.reason) in contract.REASONS
    assert result.detail


def test_the_edges_of_every_limit_are_valid() -> None:
    r = parse_message(
        _msg(
            happened_at="2000-01-01T00:00:00Z",
            operation_id=2**31 - 1,
            transaction_id=2**63 - 1,
            vendor_fiscal_module=1,
            transactions=[{"title": "x" * 200, "price": "0", "amount": -10000}] * 200,
        )
    )
    assert isinstance(r, Receipt)
    assert (r.operation_id, r.transaction_id, r.item_quantity) == (2**31 - 1, 2**63 - 1, -2000000)
    late = parse_message(_msg(happened_at="2099-12-31T23:59:59.999999+00:00"))
    assert isinstance(late, Receipt)


def test_the_largest_receipt_revenue_fits_the_receipt_types() -> None:
    # 200 lines x 10000 x 9999999999.99, worked out by hand: 17 integer digits.
    biggest = parse_message(
        _msg(transactions=[{"title": "x", "price": "9999999999.99", "amount": 10000}] * 200)
    )
    assert isinstance(biggest, Receipt)
    assert biggest.revenue == Decimal("19999999999980000.00")
    revenue = contract.spark_receipt_schema()["revenue"].dataType
    assert revenue.precision - revenue.scale >= 17 and revenue.scale == 2
    price = contract.spark_receipt_schema()["line_items"].dataType.elementType["price"].dataType
    assert (price.precision, price.scale) == (12, 2)


def test_reason_codes_strip_the_field_path() -> None:
    assert contract.reason_code("missing_field:transactions.0.price") == "missing_field"
    assert contract.reason_code("invalid_json") == "invalid_json"
    assert {"invalid_json", "missing_field", "wrong_type", "negative_price", "too_many_items",
            "timestamp_out_of_range", "bad_timestamp"} <= set(contract.REASONS)  # fmt: skip


def test_receipts_hold_utc_instants_only() -> None:
    from datetime import datetime, timedelta, timezone

    item = (contract.LineItem("Tea", Decimal("1.50"), 1),)
    with pytest.raises(ValueError, match="UTC"):
        Receipt(datetime(2026, 3, 2, 8), 1, 1, 1, item)
    with pytest.raises(ValueError, match="UTC"):
        Receipt(datetime(2026, 3, 2, 8, tzinfo=timezone(timedelta(hours=1))), 1, 1, 1, item)


@pytest.mark.parametrize(
    "raw",
    [b"4.0", b"1e17", b"100000000000000001.0", b"4E0"],
)
def test_ids_written_as_floats_are_wrong_types_not_aliases(raw: bytes) -> None:
    # 100000000000000001.0 is 1e17 as a binary float: accepting it would store the
    # receipt under another receipt's number.
    message = _msg(transaction_id=1).replace(b'"transaction_id": 1', b'"transaction_id": ' + raw)
    result = parse_message(message)
    assert isinstance(result, Invalid) and result.reason == "wrong_type:transaction_id"


def test_unknown_optional_fields_are_ignored_for_additive_evolution() -> None:
    assert isinstance(parse_message(_msg(loyalty_card="1234")), Receipt)


def _cql_table_columns(table: str) -> dict[str, str]:
    (statement,) = [s for s in cql.table_ddl("ks") if f"TABLE IF NOT EXISTS ks.{table} (" in s]
    lines = statement.split("(", 1)[1].splitlines()
    return dict(
        line.strip().rstrip(",").split(" ", 1)
        for line in lines
        if line.strip() and not line.strip().startswith(("PRIMARY KEY", ")"))
    )


def test_the_domain_types_are_the_rows_spark_and_cassandra_hold() -> None:
    """The one parity check of the pipeline's Python types with its Spark rows and CQL
    tables: a field added to a type, a struct or a table alone fails here."""
    receipt_row = contract.spark_receipt_schema()
    totals = [name for name, _ in contract.RECEIPT_TOTALS]
    # A receipt: its fields, then the totals it derives (properties, not stored twice).
    assert [f.name for f in fields(Receipt)] + totals == receipt_row.fieldNames()
    assert all(isinstance(getattr(Receipt, name), property) for name in totals)
    line_item_row = receipt_row["line_items"].dataType.elementType
    assert [f.name for f in fields(LineItem)] == line_item_row.fieldNames()
    assert [name for name, _ in contract.cql_line_item_type()[1]] == line_item_row.fieldNames()
    # The natural key: the contract's order, in the value and in the served key.
    receipt = parse_message(json.dumps(GOOD).encode())
    assert isinstance(receipt, Receipt)
    assert receipt.natural_key == tuple(getattr(receipt, name) for name in contract.NATURAL_KEY)
    assert tuple(f.name for f in fields(ReceiptKey)) == contract.NATURAL_KEY
    # An aggregate: the measures of the Spark aggregate rows and of both CQL tables.
    assert ("operation_id", "day", "window_start", *Aggregate._fields) == AGGREGATE_COLUMNS
    assert tuple(MEASURE_TYPES) == Aggregate._fields
    spark_to_cql = {"int": "int", "bigint": "bigint", "decimal(38,2)": "decimal"}
    for table in (cql.AGG_SPEED_TABLE, cql.AGG_BATCH_TABLE):
        columns = _cql_table_columns(table)
        assert set(AGGREGATE_COLUMNS) <= set(columns), table
        assert [c for c in columns if c in Aggregate._fields] == list(Aggregate._fields), table
        assert {m: columns[m] for m in Aggregate._fields} == {
            m: spark_to_cql[t] for m, t in MEASURE_TYPES.items()
        }, table
