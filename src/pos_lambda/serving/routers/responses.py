"""How the serving layer's refusals answer over HTTP: a status per `ServingError`, and
the error responses each operation declares in the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from pos_lambda.serving.errors import (
    BrokenStore,
    PageGone,
    QueryError,
    Unavailable,
    UnknownStore,
    UnregisteredStore,
)

STATUS = {
    QueryError: 422,
    PageGone: 410,
    UnknownStore: 404,
    UnregisteredStore: 404,
    BrokenStore: 409,
    Unavailable: 503,
}


class Problem(BaseModel):
    """Every refusal: what to change, in one line."""

    detail: str


def errors(*codes: int, html: bool = False) -> dict[int | str, dict[str, Any]]:
    why = {
        404: "unknown store",
        409: "the store's row in the stores table is broken: fix it (the detail says how)",
        410: "the page token has expired: start the listing again without page",
        422: "invalid parameter",
        503: "Cassandra unavailable",
    }
    if html:
        return {c: {"description": why[c], "content": {"text/html": {}}} for c in codes}
    return {c: {"description": why[c], "model": Problem} for c in codes}


JSON_ERRORS = errors(404, 422, 503)
LOCAL_ERRORS = errors(404, 409, 422, 503)  # a store's local day: its registry row counts
PAGED_ERRORS = errors(404, 410, 422, 503)
LOCAL_PAGED_ERRORS = errors(404, 409, 410, 422, 503)
