"""The HTTP API and the dashboard page over the same library (FastAPI).

    pos-serve http            # or: make serve -> http://127.0.0.1:8000/  (docs: /docs)

JSON answers are the library's rows (money as decimal strings, instants in UTC).
Errors are JSON `{"detail": "..."}` saying what to fix: 422 for a bad date (or one
outside the contract's years), an inverted or too large range, a page token this API
did not issue for that store-day or another invalid parameter, 404 for a store no view
knows (and for a receipt no view holds: its body is the receipt status, `unknown`), 503
with the reason when Cassandra is unreachable (never a stack trace). The
OpenAPI document says so for every operation; tests/integration/test_serving_schema.py
checks the app against it with Schemathesis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from prometheus_client.exposition import choose_encoder
from pydantic import BaseModel, TypeAdapter

from pos_lambda.adapters import metrics_http
from pos_lambda.serving import dashboard
from pos_lambda.serving.errors import (
    BrokenStore,
    PageGone,
    QueryError,
    ServingError,
    Unavailable,
    UnknownStore,
    UnregisteredStore,
)
from pos_lambda.serving.local_days import UNTIL_PATTERN, LocalDays, parse_until
from pos_lambda.serving.local_week import DayComparison, HourOfWeek
from pos_lambda.serving.metrics import ServingCollector
from pos_lambda.serving.model import (
    DayTotal,
    Health,
    ReceiptPage,
    StoreDay,
    TopStores,
    WindowsAnswer,
)
from pos_lambda.serving.receipt_status import ReceiptStatus
from pos_lambda.serving.requests import (
    DEVICE_MAX,
    FIRST_DAY,
    LAST_DAY,
    STORE_MAX,
    TRANSACTION_MAX,
    parse_day,
    parse_instant,
)
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings

STATUS = {
    QueryError: 422,
    PageGone: 410,
    UnknownStore: 404,
    UnregisteredStore: 404,
    BrokenStore: 409,
    Unavailable: 503,
}

DESCRIPTION = """\
One exact answer per 15-minute window from the batch and speed views of the POS Lambda
pipeline. A window is answered from the committed batch version when the batch covers it
(its day's `covered_until` and the horizon are at or after the window's end), otherwise
from the speed view; every row says its `source` and whether it is `final`.
Instants are ISO-8601 with an offset (`2026-03-02T08:00:00Z`) or a date (its UTC midnight).
"""

YEARS = f"{FIRST_DAY.isoformat()}..{LAST_DAY.isoformat()}"
StorePath = Annotated[
    int, Path(ge=0, le=STORE_MAX, description="the store (operation_id)", examples=[101])
]
# Formats and patterns are declared (so that generated requests, Schemathesis's, are
# well-formed and reach the handlers), not enforced by FastAPI: the handlers' own checks
# answer 422 with a message that says what to write.
DATE = {"format": "date"}
DayPath = Annotated[
    str,
    Path(
        description=f"a UTC day, YYYY-MM-DD, {YEARS}",
        examples=["2026-03-02"],
        json_schema_extra=DATE,
    ),
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
        description=f"last local day, included, {YEARS}",
        examples=["2026-03-08"],
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
PageSize = Annotated[int | None, Query(ge=1, le=1000)]
PageParam = Annotated[
    str | None,
    Query(
        description="next_page of the previous answer for this store and day (a signed "
        "token: anything else is refused with 422; one older than "
        "POS_SERVE_PAGE_TOKEN_MAX_AGE_SECONDS, or whose batch version is no longer served, "
        "with 410: start the listing again)"
    ),
]
INSTANT = (
    f"ISO-8601 with an offset, or a date (its UTC midnight), within the contract's years ({YEARS})"
)
# An instant: a date-time, or a date (its UTC midnight).
INSTANT_FORMAT: dict[str, Any] = {"anyOf": [{"format": "date-time"}, {"format": "date"}]}


class Problem(BaseModel):
    """Every refusal: what to change, in one line."""

    detail: str


def _errors(*codes: int, html: bool = False) -> dict[int | str, dict[str, Any]]:
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


JSON_ERRORS = _errors(404, 422, 503)
LOCAL_ERRORS = _errors(404, 409, 422, 503)  # a store's local day: its registry row counts
PAGED_ERRORS = _errors(404, 410, 422, 503)
LOCAL_PAGED_ERRORS = _errors(404, 409, 410, 422, 503)


def create_app(settings: Settings, serving: Serving | None = None) -> FastAPI:
    """The app; `serving` defaults to a library instance on `settings`."""
    lib = serving or Serving(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        lib.close()

    app = FastAPI(
        title="POS serving layer", version="1", description=DESCRIPTION, lifespan=lifespan
    )
    app.state.serving = lib

    @app.exception_handler(ServingError)
    async def serving_error(_: Request, exc: ServingError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=STATUS.get(type(exc), 500))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own checks (an integer that is not one, a missing parameter), said
        # in one line like ours; as a page for the dashboard, which a browser opens.
        parts = [
            f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0]}: {e['msg']}"
            for e in exc.errors()
        ]
        if request.url.path == "/dashboard":
            return HTMLResponse(dashboard.error_page(422, "; ".join(parts)), status_code=422)
        return JSONResponse({"detail": "; ".join(parts)}, status_code=422)

    @app.get("/stores/{store}/windows", tags=["aggregates"], responses=JSON_ERRORS)
    def windows(
        store: StorePath,
        start: Annotated[
            str,
            Query(
                description=INSTANT,
                examples=["2026-03-02T00:00:00Z"],
                json_schema_extra=INSTANT_FORMAT,
            ),
        ],
        end: Annotated[
            str,
            Query(
                description=INSTANT,
                examples=["2026-03-03T00:00:00Z"],
                json_schema_extra=INSTANT_FORMAT,
            ),
        ],
    ) -> WindowsAnswer:
        """A store's 15-minute windows starting in [start, end), each exactly once."""
        return lib.windows(store, parse_instant(start, "start"), parse_instant(end, "end"))

    @app.get("/stores/{store}/days", tags=["aggregates"], responses=JSON_ERRORS)
    def days(
        store: StorePath,
        first: Annotated[
            str,
            Query(
                description=f"first UTC day, {YEARS}",
                examples=["2026-03-01"],
                json_schema_extra=DATE,
            ),
        ],
        last: Annotated[
            str,
            Query(
                description=f"last UTC day, included, {YEARS}",
                examples=["2026-03-02"],
                json_schema_extra=DATE,
            ),
        ],
    ) -> list[DayTotal]:
        """A store's daily totals; a day is final when the batch answered all its windows."""
        return lib.daily_totals(store, parse_day(first, "first"), parse_day(last, "last"))

    @app.get("/stores/{store}/local-days", tags=["aggregates"], responses=LOCAL_ERRORS)
    def local_days(
        store: StorePath,
        first: FirstLocalDay,
        last: LastLocalDay,
    ) -> LocalDays:
        """A store's totals per local business day, in the zone the store registry gives
        it: each day the exact sum of its UTC windows (96; 92 or 100 on a DST day)."""
        return lib.local_days(store, parse_day(first, "first"), parse_day(last, "last"))

    @app.get("/stores/{store}/hour-of-week", tags=["aggregates"], responses=LOCAL_ERRORS)
    def hour_of_week(
        store: StorePath,
        first: FirstLocalDay,
        last: LastLocalDay,
    ) -> HourOfWeek:
        """A store's local days first..last summed per local weekday and hour: 7 x 24 cells
        (Monday 00:00 first) of receipts, items and revenue, each the exact sum of the
        merged 15-minute windows that start in that local hour."""
        return lib.hour_of_week(store, parse_day(first, "first"), parse_day(last, "last"))

    @app.get(
        "/stores/{store}/local-days/{day}/week-before", tags=["aggregates"], responses=LOCAL_ERRORS
    )
    def week_before(
        store: StorePath,
        day: LocalDayPath,
        until: Annotated[
            str | None,
            Query(
                description="compare both days only up to this local time, HH:MM on a "
                "15-minute boundary (a day in progress against the same hours a week "
                "before); default: whole days",
                examples=["14:30"],
                json_schema_extra={"pattern": UNTIL_PATTERN},
            ),
        ] = None,
    ) -> DayComparison:
        """A store's local day against the same weekday a week before: both days' totals
        and the change in percent (null when the week before sold nothing)."""
        cut = parse_until(until) if until is not None else None
        return lib.compare_week_before(store, parse_day(day), cut)

    @app.get("/days/{day}/top-stores", tags=["aggregates"], responses=_errors(422, 503))
    def top(day: DayPath, limit: Annotated[int, Query(ge=1, le=1000)] = 10) -> TopStores:
        """The day's stores by merged revenue, best first."""
        return lib.top_stores(parse_day(day), limit)

    @app.get("/stores/{store}/days/{day}/receipts", tags=["receipts"], responses=PAGED_ERRORS)
    def receipts(
        store: StorePath, day: DayPath, page_size: PageSize = None, page: PageParam = None
    ) -> ReceiptPage:
        """A store's receipts of a UTC day in time order, a page at a time (Cassandra
        paging)."""
        return lib.receipts(store, parse_day(day), page_size, page)

    @app.get(
        "/stores/{store}/local-days/{day}/receipts",
        tags=["receipts"],
        responses=LOCAL_PAGED_ERRORS,
    )
    def local_receipts(
        store: StorePath, day: LocalDayPath, page_size: PageSize = None, page: PageParam = None
    ) -> ReceiptPage:
        """A store's receipts of its local day (in the zone the store registry gives it:
        the UTC range [start, end) in the answer) in time order, a page at a time."""
        return lib.local_receipts(store, parse_day(day), page_size, page)

    @app.get("/stores/{store}/days/{day}/issues", tags=["receipts"], responses=PAGED_ERRORS)
    def store_day(
        store: StorePath, day: DayPath, page_size: PageSize = None, page: PageParam = None
    ) -> StoreDay:
        """Conflicting copies of the store's receipts of a UTC day, a page at a time
        (`next_page`), and what the batch fixed (with the first page)."""
        return lib.store_day(store, parse_day(day), page_size, page)

    @app.get(
        "/stores/{store}/local-days/{day}/issues",
        tags=["receipts"],
        responses=LOCAL_PAGED_ERRORS,
    )
    def local_store_day(
        store: StorePath, day: LocalDayPath, page_size: PageSize = None, page: PageParam = None
    ) -> StoreDay:
        """The same for the store's local day: conflicts whose winner happened in it,
        fixes of the windows that start in it."""
        return lib.local_store_day(store, parse_day(day), page_size, page)

    @app.get(
        "/stores/{store}/devices/{device}/receipts/{transaction}",
        tags=["receipts"],
        response_model=ReceiptStatus,
        responses={
            404: {
                "description": "unknown receipt: no view holds it (the body says so)",
                "model": ReceiptStatus,
            },
            **_errors(422, 503),
        },
    )
    def receipt(store: StorePath, device: DevicePath, transaction: TransactionPath) -> Any:
        """Did the pipeline get this receipt? accepted (with the winner's Kafka
        coordinates), resend_absorbed, conflict (both contents), dead_letter (its
        reason); unknown answers 404 with the same body, status `unknown`."""
        answer = lib.receipt_status(store, device, transaction)
        if answer.status == "unknown":
            body = TypeAdapter(ReceiptStatus).dump_python(answer, mode="json")
            return JSONResponse(body, status_code=404)
        return answer

    @app.get("/health", tags=["pipeline"], responses=_errors(422, 503))
    def health(runs: Annotated[int, Query(ge=1, le=100)] = 5) -> Health:
        """Batch horizon and its age, last batch runs, speed progress, dead letters."""
        return lib.health(runs)

    registry = metrics_http.registry_of(
        ServingCollector(lib, settings.state_dir / "audit" / "last.json")
    )

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        """OpenMetrics for Prometheus (or its older text format, as the scraper asks)."""
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), media_type=content_type)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard")

    @app.get(
        "/dashboard",
        response_class=HTMLResponse,
        tags=["dashboard"],
        responses=_errors(404, 422, 503, html=True),
    )
    def page(
        store: Annotated[int | None, Query(ge=0, le=STORE_MAX)] = None,
        day: Annotated[
            str | None,
            Query(
                description=f"a day, YYYY-MM-DD, {YEARS}: the store's local day or a UTC day; "
                "empty (the page's form with no day) is the default day",
                # The form sends `day=` when its field is empty: that is the default too.
                json_schema_extra={
                    "anyOf": [
                        {"type": "string", "format": "date"},
                        {"type": "string", "maxLength": 0},
                        {"type": "null"},
                    ]
                },
            ),
        ] = None,
        view: Annotated[
            Literal["local", "utc"],
            Query(description="days by the store's local day (its registered zone) or by UTC"),
        ] = "local",
    ) -> HTMLResponse:
        """A store's local (or UTC) day as 15-minute bars coloured by source, the horizon,
        totals, the same weekday a week before, the hour-of-week heatmap and health."""
        try:
            html = dashboard.page(lib, store, parse_day(day) if day else None, view)
        except ServingError as exc:
            code = STATUS.get(type(exc), 500)
            return HTMLResponse(dashboard.error_page(code, str(exc)), status_code=code)
        return HTMLResponse(html)

    return app


def serve(settings: Settings, port: int | None = None) -> None:
    """Run the app with uvicorn on bind_host (127.0.0.1 by default)."""
    import uvicorn

    port = port or settings.serve.port
    print(
        f"serving on http://{settings.bind_host}:{port}/ (dashboard; API docs at /docs)",
        flush=True,
    )
    uvicorn.run(create_app(settings), host=settings.bind_host, port=port, log_level="warning")
