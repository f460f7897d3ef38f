"""The pipeline's state: health (horizon, batch runs, speed progress, dead letters) and
the OpenMetrics that Prometheus scrapes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.exposition import choose_encoder

from pos_lambda.serving.model import Health
from pos_lambda.serving.routers.params import Runs, ServingDep
from pos_lambda.serving.routers.responses import errors

router = APIRouter()


@router.get("/health", tags=["pipeline"], responses=errors(422, 503))
def health(lib: ServingDep, runs: Runs = 5) -> Health:
    """Batch horizon and its age, last batch runs, speed progress, dead letters."""
    return lib.health(runs)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """OpenMetrics for Prometheus (or its older text format, as the scraper asks)."""
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(request.app.state.metrics), media_type=content_type)
