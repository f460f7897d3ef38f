"""Rendering answers for people (tables) and programs (JSON, the HTTP API's encoding)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from datetime import date, datetime
from typing import Any

from pydantic import TypeAdapter


def to_json(value: Any) -> str:
    """The same JSON the HTTP API answers (pydantic: decimals as strings, UTC as Z)."""
    return TypeAdapter(type(value)).dump_json(value, indent=2).decode()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(_cell(v) for v in value)
    return str(value)


def table(rows: Sequence[Any], columns: Sequence[str] | None = None) -> str:
    """Rows (dataclasses) as aligned text columns; numbers right-aligned."""
    if not rows:
        return "(none)"
    first = rows[0]
    assert is_dataclass(first)
    names = list(columns or [f.name for f in fields(first)])
    cells = [[_cell(getattr(r, n)) for n in names] for r in rows]
    widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
    numeric = [
        all(isinstance(getattr(r, n), int | float) or _is_decimal(getattr(r, n)) for r in rows)
        for n in names
    ]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(names), *(line(c) for c in cells)])


def _is_decimal(value: Any) -> bool:
    from decimal import Decimal

    return isinstance(value, Decimal)
