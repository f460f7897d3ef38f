"""What each parameter of the HTTP API accepts, as the OpenAPI document declares it, and
the serving library every route answers from.

The document declares exactly what the handlers accept, so that a client generated from
it (or Schemathesis) sends nothing they refuse: the contract's years (2000-01-01 ..
2099-12-31) as patterns beside the `date` and `date-time` formats, the page tokens'
shape, the HH:MM grid of `until`, the integers' ranges. The patterns and formats are
declared, not enforced by FastAPI: the handlers' own checks answer 422 with a message
that says what to write. What no parameter's schema can say (a range's order and
length, a token this API signed) the descriptions say in words.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request

from pos_lambda.serving import paging
from pos_lambda.serving.local_days import UNTIL_PATTERN
from pos_lambda.serving.requests import (
    DAY_PATTERN,
    DAY_WITH_WEEK_BEFORE_PATTERN,
    DEVICE_MAX,
    FIRST_DAY,
    INSTANT_PATTERN,
    LAST_DAY,
    STORE_MAX,
    TRANSACTION_MAX,
)
from pos_lambda.serving.service import Serving


async def _serving(request: Request) -> Serving:
    served: Serving = request.app.state.serving
    return served


# The library the app was made with (`create_app`).
ServingDep = Annotated[Serving, Depends(_serving)]

YEARS = f"{FIRST_DAY.isoformat()}..{LAST_DAY.isoformat()}"
RANGE = "at most POS_SERVE_MAX_RANGE_DAYS days (31 by default)"
DATE: dict[str, Any] = {"format": "date", "pattern": DAY_PATTERN}
# An instant: a date-time, or a date (its UTC midnight).
INSTANT_FORMAT: dict[str, Any] = {
    "anyOf": [
        {"format": "date-time", "pattern": INSTANT_PATTERN},
        {"format": "date", "pattern": DAY_PATTERN},
    ]
}
INSTANT = (
    f"ISO-8601 with an offset, or a date (its UTC midnight), within the contract's years ({YEARS})"
)

StorePath = Annotated[
    int, Path(ge=0, le=STORE_MAX, description="the store (operation_id)", examples=[101])
]
DevicePath = Annotated[
    int,
    Path(ge=0, le=DEVICE_MAX, description="the POS device (vendor_fiscal_module)", examples=[7]),
]
TransactionPath = Annotated[
    int,
    Path(
        ge=0,
        le=TRANSACTION_MAX,
        description="the receipt number on that device (transaction_id)",
        examples=[42],
    ),
]
DayPath = Annotated[
    str,
    Path(
        description=f"a UTC day, YYYY-MM-DD, {YEARS}",
        examples=["2026-03-02"],
        json_schema_extra=DATE,
    ),
]
LocalDayPath = Annotated[
    str,
    Path(
        description=f"a local day of the store, YYYY-MM-DD, {YEARS}",
        examples=["2026-03-09"],
        json_schema_extra=DATE,
    ),
]
# Compared with the same weekday a week before, which must be inside the years too.
WeekBeforeDayPath = Annotated[
    str,
    Path(
        description=f"a local day of the store, YYYY-MM-DD, {FIRST_DAY.replace(day=8)}.."
        f"{LAST_DAY} (its week before is inside the contract's years, {YEARS})",
        examples=["2026-03-09"],
        json_schema_extra={"format": "date", "pattern": DAY_WITH_WEEK_BEFORE_PATTERN},
    ),
]
Start = Annotated[
    str,
    Query(
        description=INSTANT,
        examples=["2026-03-02T00:00:00Z"],
        json_schema_extra=INSTANT_FORMAT,
    ),
]
End = Annotated[
    str,
    Query(
        description=f"{INSTANT}; after start, {RANGE} after it",
        examples=["2026-03-03T00:00:00Z"],
        json_schema_extra=INSTANT_FORMAT,
    ),
]
FirstDay = Annotated[
    str,
    Query(
        description=f"first UTC day, {YEARS}",
        examples=["2026-03-01"],
        json_schema_extra=DATE,
    ),
]
LastDay = Annotated[
    str,
    Query(
        description=f"last UTC day, included, {YEARS}; not before first, {RANGE} in all",
        examples=["2026-03-02"],
        json_schema_extra=DATE,
    ),
]
FirstLocalDay = Annotated[
    str,
    Query(
        description=f"first local day of the store, {YEARS}",
        examples=["2026-03-02"],
        json_schema_extra=DATE,
    ),
]
LastLocalDay = Annotated[
    str,
    Query(
        description=f"last local day, included, {YEARS}; not before first, {RANGE} in all",
        examples=["2026-03-08"],
        json_schema_extra=DATE,
    ),
]
Until = Annotated[
    str | None,
    Query(
        description="compare both days only up to this local time, HH:MM on a "
        "15-minute boundary (a day in progress against the same hours a week "
        "before); default: whole days",
        examples=["14:30"],
        json_schema_extra={"pattern": UNTIL_PATTERN},
    ),
]
PageSize = Annotated[int | None, Query(ge=1, le=1000)]
PageParam = Annotated[
    str | None,
    Query(
        description="next_page of the previous answer for this store and day (a signed "
        "token: anything else is refused with 422; one older than "
        "POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS, or whose batch version is no longer served, "
        "with 410: start the listing again); absent or empty: the first page",
        json_schema_extra={"pattern": paging.TOKEN_PATTERN, "maxLength": paging.MAX_TOKEN_CHARS},
    ),
]
Limit = Annotated[int, Query(ge=1, le=1000)]
Runs = Annotated[int, Query(ge=1, le=100)]
DashboardStore = Annotated[int | None, Query(ge=0, le=STORE_MAX)]
DashboardDay = Annotated[
    str | None,
    Query(
        description=f"a day, YYYY-MM-DD, {YEARS}: the store's local day or a UTC day; "
        "empty (the page's form with no day) is the default day",
        # The form sends `day=` when its field is empty: that is the default too.
        json_schema_extra={
            "anyOf": [
                {"type": "string", **DATE},
                {"type": "string", "maxLength": 0},
                {"type": "null"},
            ]
        },
    ),
]
