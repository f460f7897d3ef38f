"""The pages a browser opens: the dashboard (a store's day as 15-minute bars, the
horizon, the week before, the hour-of-week heatmap, health) and the root, which leads
to it."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, RedirectResponse

from pos_lambda.serving import dashboard
from pos_lambda.serving.errors import ServingError
from pos_lambda.serving.requests import parse_day
from pos_lambda.serving.routers.params import DashboardDay, DashboardStore, ServingDep
from pos_lambda.serving.routers.responses import STATUS, errors

router = APIRouter()


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/dashboard")


@router.get(
    "/dashboard",
    response_class=HTMLResponse,
    tags=["dashboard"],
    responses=errors(404, 422, 503, html=True),
)
def page(
    lib: ServingDep,
    store: DashboardStore = None,
    day: DashboardDay = None,
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
