"""The receipts: a store's UTC or local day a page at a time, its conflicting copies
(issues) likewise, and one receipt's status ("did you get receipt X?")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter

from pos_lambda.serving.gaps import GapsAnswer
from pos_lambda.serving.model import ReceiptPage, StoreDay
from pos_lambda.serving.receipt_status import ReceiptStatus
from pos_lambda.serving.requests import parse_day
from pos_lambda.serving.routers.params import (
    DayPath,
    DevicePath,
    LocalDayPath,
    PageParam,
    PageSize,
    ServingDep,
    StorePath,
    TransactionPath,
)
from pos_lambda.serving.routers.responses import (
    JSON_ERRORS,
    LOCAL_PAGED_ERRORS,
    PAGED_ERRORS,
    errors,
)

router = APIRouter(tags=["receipts"])


@router.get("/stores/{store}/days/{day}/receipts", responses=PAGED_ERRORS)
def receipts(
    lib: ServingDep,
    store: StorePath,
    day: DayPath,
    page_size: PageSize = None,
    page: PageParam = None,
) -> ReceiptPage:
    """A store's receipts of a UTC day in time order, a page at a time (Cassandra
    paging)."""
    return lib.receipts(store, parse_day(day), page_size, page)


@router.get("/stores/{store}/local-days/{day}/receipts", responses=LOCAL_PAGED_ERRORS)
def local_receipts(
    lib: ServingDep,
    store: StorePath,
    day: LocalDayPath,
    page_size: PageSize = None,
    page: PageParam = None,
) -> ReceiptPage:
    """A store's receipts of its local day (in the zone the store registry gives it:
    the UTC range [start, end) in the answer) in time order, a page at a time."""
    return lib.local_receipts(store, parse_day(day), page_size, page)


@router.get("/stores/{store}/days/{day}/issues", responses=PAGED_ERRORS)
def store_day(
    lib: ServingDep,
    store: StorePath,
    day: DayPath,
    page_size: PageSize = None,
    page: PageParam = None,
) -> StoreDay:
    """Conflicting copies of the store's receipts of a UTC day, a page at a time
    (`next_page`), and what the batch fixed (with the first page)."""
    return lib.store_day(store, parse_day(day), page_size, page)


@router.get("/stores/{store}/days/{day}/gaps", responses=JSON_ERRORS)
def gaps(lib: ServingDep, store: StorePath, day: DayPath) -> GapsAnswer:
    """Did we get every receipt? Each device's first and last number of the store's UTC
    day, its receipt count and the ranges missing from its numbers: `final` once the
    batch layer covers the day, `provisional` before (a range `may still arrive` until
    the speed layer's lateness bound has passed), `not yet backfilled` for a final day
    committed before the gaps view existed."""
    return lib.gaps(store, parse_day(day))


@router.get("/stores/{store}/local-days/{day}/issues", responses=LOCAL_PAGED_ERRORS)
def local_store_day(
    lib: ServingDep,
    store: StorePath,
    day: LocalDayPath,
    page_size: PageSize = None,
    page: PageParam = None,
) -> StoreDay:
    """The same for the store's local day: conflicts whose winner happened in it,
    fixes of the windows that start in it."""
    return lib.local_store_day(store, parse_day(day), page_size, page)


@router.get(
    "/stores/{store}/devices/{device}/receipts/{transaction}",
    response_model=ReceiptStatus,
    responses={
        404: {
            "description": "unknown receipt: no view holds it (the body says so)",
            "model": ReceiptStatus,
        },
        **errors(422, 503),
    },
)
def receipt(
    lib: ServingDep, store: StorePath, device: DevicePath, transaction: TransactionPath
) -> Any:
    """Did the pipeline get this receipt? accepted (with the winner's Kafka
    coordinates), resend_absorbed, conflict (both contents), dead_letter (its
    reason); unknown answers 404 with the same body, status `unknown`."""
    answer = lib.receipt_status(store, device, transaction)
    if answer.status == "unknown":
        body = TypeAdapter(ReceiptStatus).dump_python(answer, mode="json")
        return JSONResponse(body, status_code=404)
    return answer
