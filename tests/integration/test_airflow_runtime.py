"""The local Airflow 3 really runs: healthy, logs in with the printed admin login, lists DAGs.

Started through the same code as `pos-infra airflow up` (reused if it already runs) and
stopped again only if this test started it, then even if the run is killed in the middle
(airflow_service.owned). Needs nothing but the `airflow` extra.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import airflow_service

pytestmark = pytest.mark.integration


def _call(url: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


@pytest.fixture(scope="module")
def airflow(base_settings: Settings) -> Iterator[Settings]:
    procs = airflow_service.processes(base_settings).values()
    if all(p.pid() is not None for p in procs):  # someone's: leave it as we found it
        assert airflow_service.start(base_settings) == 0.0
        yield base_settings
        return
    with airflow_service.owned(base_settings, base_settings):
        airflow_service.start(base_settings)
        yield base_settings
    assert airflow_service.status(base_settings) == "stopped"


def test_every_component_is_healthy(airflow: Settings) -> None:
    assert airflow_service.health(airflow) == {
        "metadatabase": "healthy",
        "scheduler": "healthy",
        "triggerer": "healthy",
        "dag_processor": "healthy",
    }
    assert airflow_service.status(airflow).startswith("ready")


def test_admin_login_gets_a_token_that_lists_dags(airflow: Settings) -> None:
    creds = airflow_service.login(airflow)
    assert creds is not None and creds[0] == airflow.airflow.admin_user
    url = airflow_service.base_url(airflow)
    token = _call(f"{url}/auth/token", {"username": creds[0], "password": creds[1]})["access_token"]
    dags = _call(f"{url}/api/v2/dags", token=token)
    assert isinstance(dags["dags"], list)
    assert dags["total_entries"] >= len(dags["dags"])


def test_the_api_refuses_requests_without_a_token(airflow: Settings) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        _call(f"{airflow_service.base_url(airflow)}/api/v2/dags")
    assert err.value.code == 401
