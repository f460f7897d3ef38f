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

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from pos_lambda.adapters import metrics_http
from pos_lambda.serving import dashboard
from pos_lambda.serving.errors import ServingError
from pos_lambda.serving.metrics import ServingCollector
from pos_lambda.serving.routers import aggregates, pages, pipeline, receipts
from pos_lambda.serving.routers.responses import STATUS
from pos_lambda.serving.service import Serving
from pos_lambda.settings import Settings

DESCRIPTION = """\
One exact answer per 15-minute window from the batch and speed views of the POS Lambda
pipeline. A window is answered from the committed batch version when the batch covers it
(its day's `covered_until` and the horizon are at or after the window's end), otherwise
from the speed view; every row says its `source` and whether it is `final`.
Instants are ISO-8601 with an offset (`2026-03-02T08:00:00Z`) or a date (its UTC midnight).
"""


async def serving_error(_: Request, exc: ServingError) -> Response:
    return JSONResponse({"detail": str(exc)}, status_code=STATUS.get(type(exc), 500))


async def invalid(request: Request, exc: RequestValidationError) -> Response:
    # FastAPI's own checks (an integer that is not one, a missing parameter), said
    # in one line like ours; as a page for the dashboard, which a browser opens.
    parts = [
        f"{'.'.join(str(p) for p in e['loc'][1:]) or e['loc'][0]}: {e['msg']}" for e in exc.errors()
    ]
    if request.url.path == "/dashboard":
        return HTMLResponse(dashboard.error_page(422, "; ".join(parts)), status_code=422)
    return JSONResponse({"detail": "; ".join(parts)}, status_code=422)


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
    app.state.serving = lib  # what the routes answer from (routers.params.ServingDep)
    app.state.metrics = metrics_http.registry_of(
        ServingCollector(lib, settings.state_dir / "audit" / "last.json")
    )
    app.exception_handler(ServingError)(serving_error)
    app.exception_handler(RequestValidationError)(invalid)
    for area in (aggregates, receipts, pipeline, pages):
        app.include_router(area.router)
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
