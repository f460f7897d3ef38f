"""The POS message contract, version 1: the single source of truth.

Every field is declared once, in `RECEIPT_FIELDS` and `LINE_ITEM_FIELDS`, with a
`Kind` that knows its JSON Schema fragment, its Spark types and its CQL type. The
JSON Schema (`json_schema()`, committed as pos_transaction.v1.schema.json), the
Spark StructTypes and the CQL columns are all derived from these lists, and
`parse_message` enforces the JSON Schema itself, so producer, speed layer and
batch layer accept exactly the same messages.

    python -m pos_lambda.schemas.contract --write   # regenerate the committed JSON Schema

Evolution (see src/pos_lambda/schemas/README.md): within v1 only optional fields may be added;
anything else is a v2 with its own schema file and topic.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastjsonschema
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

if TYPE_CHECKING:  # pyspark is imported lazily: the producer never needs it
    from pyspark.sql.types import DataType, StructType

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name(f"pos_transaction.v{SCHEMA_VERSION}.schema.json")

NATURAL_KEY = ("operation_id", "vendor_fiscal_module", "transaction_id")
# A receipt's natural key as a value, in NATURAL_KEY order: a plain tuple, so that the
# keys the layers build from rows, ledger lines and Kafka record keys compare equal.
NaturalKey = tuple[int, int, int]
# A receipt is *late* when its first copy reaches Kafka (record timestamp) more than
# this after it happened. The producer's ledger and both layers use this definition.
LATE_THRESHOLD = timedelta(minutes=15)


@dataclass(frozen=True)
class Limits:
    """Bounds that keep bad input from hurting (memory, row sizes, nonsense values)."""

    max_message_bytes: int = 64 * 1024
    max_line_items: int = 200
    max_title_chars: int = 200
    max_store_or_device_id: int = 2**31 - 1
    max_transaction_id: int = 2**63 - 1
    max_abs_amount: int = 10_000
    price_integer_digits: int = 10
    # happened_at must fall in [earliest, latest_exclusive): the JSON Schema's pattern
    # admits local years 2000-2099 only; parse_message also checks the UTC instant.
    earliest: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    latest_exclusive: datetime = datetime(2100, 1, 1, tzinfo=UTC)


LIMITS = Limits()

# ISO-8601 with a mandatory offset (or Z), seconds precision, optional fraction.
_TIMESTAMP_SHAPE = (
    r"-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
TIMESTAMP_PATTERN = r"^20[0-9]{2}" + _TIMESTAMP_SHAPE  # the schema's: years 2000-2099
# Tells the two reasons apart; `\Z`, since Python's `$` also matches before a final "\n".
_ANY_YEAR_TIMESTAMP = re.compile(r"^[0-9]{4}" + _TIMESTAMP_SHAPE.removesuffix("$") + r"\Z")
PRICE_PATTERN = rf"^[0-9]{{1,{LIMITS.price_integer_digits}}}(\.[0-9]{{1,2}})?$"
PRICE_PRECISION, PRICE_SCALE = LIMITS.price_integer_digits + 2, 2
# The largest |revenue| a valid receipt can have (every limit at its maximum) must fit
# the receipt's decimal type: a Spark decimal overflow fails the whole micro-batch.
MAX_RECEIPT_REVENUE = (
    LIMITS.max_line_items
    * LIMITS.max_abs_amount
    * (Decimal(10) ** LIMITS.price_integer_digits - Decimal("0.01"))
)
RECEIPT_REVENUE_PRECISION = len(str(int(MAX_RECEIPT_REVENUE))) + PRICE_SCALE


@dataclass(frozen=True)
class Kind:
    """One field type, in every representation the pipeline uses."""

    json: dict[str, Any]
    spark_message: str  # type in the raw message as parsed by from_json (DDL type name)
    spark_receipt: str  # type in a validated receipt row
    cql: str


ID32 = Kind(
    {"type": "integer", "minimum": 1, "maximum": LIMITS.max_store_or_device_id},
    "bigint", "int", "int",
)  # fmt: skip
ID64 = Kind(
    {"type": "integer", "minimum": 1, "maximum": LIMITS.max_transaction_id},
    "bigint", "bigint", "bigint",
)  # fmt: skip
TIMESTAMP = Kind(
    {"type": "string", "pattern": TIMESTAMP_PATTERN, "maxLength": 40},
    "string", "timestamp", "timestamp",
)  # fmt: skip
TITLE = Kind(
    {"type": "string", "minLength": 1, "maxLength": LIMITS.max_title_chars},
    "string", "string", "text",
)  # fmt: skip
MONEY = Kind(
    {"type": "string", "pattern": PRICE_PATTERN},
    "string", f"decimal({PRICE_PRECISION},{PRICE_SCALE})", "decimal",
)  # fmt: skip
QUANTITY = Kind(
    {
        "type": "integer",
        "minimum": -LIMITS.max_abs_amount,
        "maximum": LIMITS.max_abs_amount,
        "not": {"const": 0},
    },
    "bigint", "int", "int",
)  # fmt: skip


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: Kind
    doc: str
    # Name in Spark receipt rows and CQL, where the field's JSON name misleads.
    column: str = ""

    @property
    def column_name(self) -> str:
        return self.column or self.name


LINE_ITEM_FIELDS = (
    FieldSpec("title", TITLE, "Item name as printed on the receipt."),
    FieldSpec("price", MONEY, "Unit price, decimal string, non-negative, 2 decimals at most."),
    FieldSpec("amount", QUANTITY, "Quantity; negative for a return, never zero."),
)
SCALAR_FIELDS = (
    FieldSpec("happened_at", TIMESTAMP, "When the receipt was issued, ISO-8601 with offset."),
    FieldSpec("operation_id", ID32, "The store."),
    FieldSpec("transaction_id", ID64, "Receipt number on the device (fiscal module)."),
    FieldSpec("vendor_fiscal_module", ID32, "The POS device (fiscal module)."),
)
LINE_ITEMS_JSON_NAME = "transactions"
LINE_ITEMS_COLUMN = "line_items"
LINE_ITEM_UDT = "line_item"

# Reason codes of Invalid messages (the speed and batch layers dead-letter with the
# same codes). Codes marked "(:field)" carry the JSON path of the offending field,
# e.g. "missing_field:transactions.0.price"; `reason_code` strips it.
REASONS = {
    "too_large": f"message over {LIMITS.max_message_bytes} bytes",
    "invalid_encoding": "not UTF-8",
    "invalid_json": "not parseable as JSON",
    "not_an_object": "JSON, but not an object",
    "missing_field": "a required field is absent (reason carries :field)",
    "wrong_type": "a field has the wrong JSON type (reason carries :field)",
    "out_of_range": "a number outside its bounds (reason carries :field)",
    "bad_length": "a string too short or too long (reason carries :field)",
    "bad_timestamp": "happened_at is not an ISO-8601 date-time with offset",
    "timestamp_out_of_range": "happened_at before 2000-01-01 or from 2100-01-01 (UTC)",
    "negative_price": "a price below zero",
    "bad_price": "a price that is not a decimal with at most 2 places",
    "zero_amount": "a line item with quantity 0",
    "no_items": "a receipt without line items",
    "too_many_items": f"more than {LIMITS.max_line_items} line items",
    "empty_value": "a Kafka record without value",
    "schema_violation": "any other JSON Schema violation (reason carries :field)",
    "unrepresentable": "accepted, but a value does not fit its Spark type (a contract bug)",
    "internal_error": "the validator itself failed (a bug): kept for replay once fixed",
}


def reason_code(reason: str) -> str:
    """The code of a reason without its field path: "wrong_type:operation_id" -> "wrong_type"."""
    return reason.split(":", 1)[0]


def json_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a POS message, derived from the field lists."""
    item = {
        "type": "object",
        "required": [f.name for f in LINE_ITEM_FIELDS],
        "properties": {f.name: {**f.kind.json, "description": f.doc} for f in LINE_ITEM_FIELDS},
    }
    props: dict[str, Any] = {f.name: {**f.kind.json, "description": f.doc} for f in SCALAR_FIELDS}
    props[LINE_ITEMS_JSON_NAME] = {
        "type": "array",
        "minItems": 1,
        "maxItems": LIMITS.max_line_items,
        "items": item,
        "description": "Line items of the receipt.",
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:pos-lambda:pos-transaction:v{SCHEMA_VERSION}",
        "title": f"POS transaction (receipt), contract v{SCHEMA_VERSION}",
        "type": "object",
        "required": [*(f.name for f in SCALAR_FIELDS), LINE_ITEMS_JSON_NAME],
        "properties": props,
        # Additive evolution: a v1 consumer ignores optional fields it does not know.
        "additionalProperties": True,
    }


# Derived per-receipt totals a validated receipt row carries beside its fields.
RECEIPT_TOTALS = (
    ("item_quantity", "bigint"),
    ("revenue", f"decimal({RECEIPT_REVENUE_PRECISION},{PRICE_SCALE})"),
)


def _struct(fields: list[tuple[str, str]]) -> str:
    return "struct<" + ",".join(f"{n}:{t}" for n, t in fields) + ">"


def spark_message_ddl() -> str:
    """DDL of the raw message as `from_json` sees it (strings kept for validation)."""
    item = _struct([(f.name, f.kind.spark_message) for f in LINE_ITEM_FIELDS])
    cols = [(f.name, f.kind.spark_message) for f in SCALAR_FIELDS]
    return _struct([*cols, (LINE_ITEMS_JSON_NAME, f"array<{item}>")])


def spark_receipt_ddl() -> str:
    """DDL of a validated receipt row (typed; money decimal; derived totals)."""
    item = _struct([(f.column_name, f.kind.spark_receipt) for f in LINE_ITEM_FIELDS])
    cols = [(f.column_name, f.kind.spark_receipt) for f in SCALAR_FIELDS]
    return _struct(
        [
            *cols,
            (LINE_ITEMS_COLUMN, f"array<{item}>"),
            *RECEIPT_TOTALS,
        ]
    )


def _spark_primitive(ddl_type: str) -> DataType:
    from pyspark.sql import types as T

    if ddl_type.startswith("decimal("):
        precision, scale = ddl_type[len("decimal(") : -1].split(",")
        return T.DecimalType(int(precision), int(scale))
    return {
        "bigint": T.LongType(),
        "int": T.IntegerType(),
        "string": T.StringType(),
        "timestamp": T.TimestampType(),
    }[ddl_type]


def _spark_struct(fields: list[tuple[str, str | DataType]]) -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(n, _spark_primitive(t) if isinstance(t, str) else t) for n, t in fields]
    )


def spark_message_schema() -> StructType:
    """StructType of the raw message for `from_json` (same shape as spark_message_ddl)."""
    from pyspark.sql import types as T

    item = _spark_struct([(f.name, f.kind.spark_message) for f in LINE_ITEM_FIELDS])
    return _spark_struct(
        [
            *((f.name, f.kind.spark_message) for f in SCALAR_FIELDS),
            (LINE_ITEMS_JSON_NAME, T.ArrayType(item)),
        ]
    )


def spark_receipt_schema() -> StructType:
    """StructType of a validated receipt row (same shape as spark_receipt_ddl)."""
    from pyspark.sql import types as T

    item = _spark_struct([(f.column_name, f.kind.spark_receipt) for f in LINE_ITEM_FIELDS])
    return _spark_struct(
        [
            *((f.column_name, f.kind.spark_receipt) for f in SCALAR_FIELDS),
            (LINE_ITEMS_COLUMN, T.ArrayType(item)),
            *RECEIPT_TOTALS,
        ]
    )


def cql_line_item_type() -> tuple[str, list[tuple[str, str]]]:
    return LINE_ITEM_UDT, [(f.column_name, f.kind.cql) for f in LINE_ITEM_FIELDS]


def cql_receipt_columns() -> list[tuple[str, str]]:
    """Columns of a stored receipt (its contract fields), in contract order."""
    cols = [(f.column_name, f.kind.cql) for f in SCALAR_FIELDS]
    return [*cols, (LINE_ITEMS_COLUMN, f"list<frozen<{LINE_ITEM_UDT}>>")]


def cql_type_of(name: str) -> str:
    return dict(cql_receipt_columns())[name]


# --- validation --------------------------------------------------------------------


@dataclass(frozen=True)
class LineItem:
    title: str
    price: Decimal
    amount: int


@dataclass(frozen=True)
class Receipt:
    happened_at: datetime  # UTC
    operation_id: int
    transaction_id: int
    vendor_fiscal_module: int
    line_items: tuple[LineItem, ...]

    def __post_init__(self) -> None:
        # Receipts hold instants in UTC; a naive or local time here is a caller's bug.
        if self.happened_at.utcoffset() != timedelta(0):
            raise ValueError(f"happened_at must be UTC, got {self.happened_at!r}")

    @property
    def natural_key(self) -> NaturalKey:
        return (self.operation_id, self.vendor_fiscal_module, self.transaction_id)

    @property
    def item_quantity(self) -> int:
        return sum(i.amount for i in self.line_items)

    @property
    def revenue(self) -> Decimal:
        return sum((i.price * i.amount for i in self.line_items), Decimal("0.00"))

    def to_json(self) -> dict[str, Any]:
        """The message this receipt came from (money as strings, time with offset)."""
        return {
            **{f.name: _json_value(getattr(self, f.column_name)) for f in SCALAR_FIELDS},
            LINE_ITEMS_JSON_NAME: [
                {f.name: _json_value(getattr(i, f.column_name)) for f in LINE_ITEM_FIELDS}
                for i in self.line_items
            ],
        }


@dataclass(frozen=True)
class Invalid:
    reason: str  # a key of REASONS, optionally ":field.path"
    detail: str = field(default="")


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    # JSON Schema patterns are ECMA-262: `$` is the end of the string. Python's `$`
    # also matches before a final newline, so "...Z\n" would pass the reference
    # validator and fail the compiled one (which rewrites `$` to `\Z`, as we do here).
    if isinstance(instance, str) and not re.search(_DOLLAR.sub(r"\\Z", pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_DOLLAR = re.compile(r"(?<!\\)\$")
_ReferenceValidator = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})
_VALIDATOR = _ReferenceValidator(json_schema())
# The same schema compiled to Python: ~7x faster on the valid path, which is nearly
# every message. On failure the reference validator above names the reason, so
# both always judge by the one JSON Schema (a test checks they agree).
_FAST_VALIDATE = fastjsonschema.compile(json_schema())


def _path(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "$"


def _reason(error: ValidationError) -> str:
    path, last = _path(error), (error.absolute_path[-1] if error.absolute_path else None)
    v = error.validator
    if v == "required":
        missing = str(error.message).split("'")[1]
        prefix = path if path != "$" else ""
        return f"missing_field:{prefix + '.' if prefix else ''}{missing}"
    if last == "happened_at" and v in ("pattern", "maxLength"):
        shaped = _ANY_YEAR_TIMESTAMP.match(str(error.instance))
        return "timestamp_out_of_range" if shaped else "bad_timestamp"
    if last == "price" and v == "pattern":
        return "negative_price" if str(error.instance).lstrip().startswith("-") else "bad_price"
    if last == "amount" and v == "not":
        return "zero_amount"
    if last == LINE_ITEMS_JSON_NAME and v in ("minItems", "maxItems"):
        return "no_items" if v == "minItems" else "too_many_items"
    return {
        "type": f"wrong_type:{path}",
        "minimum": f"out_of_range:{path}",
        "maximum": f"out_of_range:{path}",
        "minLength": f"bad_length:{path}",
        "maxLength": f"bad_length:{path}",
    }.get(str(v), f"schema_violation:{path}")


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not.
    raise ValueError(f"{name} is not JSON")


def parse_message(value: bytes) -> Receipt | Invalid:
    """Validate one raw message against the contract; never raises on bad input.

    Beyond the JSON Schema it enforces what JSON Schema cannot say: numbers with a
    fraction or exponent are never integers (`1e17` and `1.0` are floats, not ids:
    they could alias another receipt), money is never a JSON number, NaN/Infinity and
    integers of more than 4300 digits are not JSON we accept, the date exists, the
    UTC instant is within the limits, and every text is valid Unicode (a lone
    surrogate such as "\\ud800" would fail any UTF-8 writer downstream).
    """
    if len(value) > LIMITS.max_message_bytes:
        return Invalid("too_large", f"{len(value)} bytes")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Invalid("invalid_encoding", str(exc))
    try:
        # Decimal floats: neither validator counts a Decimal as an integer, and no
        # number is ever rounded through a binary float.
        doc = json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return Invalid("invalid_json", str(exc)[:500])
    if not isinstance(doc, dict):
        return Invalid("not_an_object", type(doc).__name__)
    try:
        _FAST_VALIDATE(doc)
    except fastjsonschema.JsonSchemaException as fast_error:
        error = best_match(_VALIDATOR.iter_errors(doc))
        if error is None:  # the validators disagree (a test proves they do not)
            return Invalid("schema_violation", str(fast_error)[:500])
        return Invalid(_reason(error), error.message[:500])
    try:
        happened_at = datetime.fromisoformat(doc["happened_at"]).astimezone(UTC)
    except ValueError as exc:  # matches the pattern but is no date, e.g. Feb 30
        return Invalid("bad_timestamp", str(exc))
    # The pattern bounds the local year; an offset can still move the instant across.
    if not LIMITS.earliest <= happened_at < LIMITS.latest_exclusive:
        return Invalid("timestamp_out_of_range", f"{happened_at.isoformat()} in UTC")
    items = doc[LINE_ITEMS_JSON_NAME]
    for n, item in enumerate(items):
        try:
            item["title"].encode("utf-8")
        except UnicodeEncodeError as exc:
            return Invalid("invalid_encoding", f"{LINE_ITEMS_JSON_NAME}.{n}.title: {exc}"[:500])
    return Receipt(
        happened_at=happened_at,
        **{f.column_name: doc[f.name] for f in SCALAR_FIELDS if f.kind is not TIMESTAMP},
        line_items=tuple(
            LineItem(**{f.column_name: _typed(f, i[f.name]) for f in LINE_ITEM_FIELDS})
            for i in items
        ),
    )


def _typed(spec: FieldSpec, value: Any) -> Any:
    return Decimal(value) if spec.kind is MONEY else value


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value) if isinstance(value, Decimal) else value


def receipt_to_spark_row(r: Receipt) -> tuple[Any, ...]:
    """A Receipt as a tuple in spark_receipt_schema() order (fields, items, totals)."""
    return (
        *(getattr(r, f.column_name) for f in SCALAR_FIELDS),
        [tuple(getattr(i, f.column_name) for f in LINE_ITEM_FIELDS) for i in r.line_items],
        *(getattr(r, name) for name, _ in RECEIPT_TOTALS),
    )


def _main(argv: list[str]) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if argv == ["--write"]:
        SCHEMA_FILE.write_text(text)
        print(f"wrote {SCHEMA_FILE}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
