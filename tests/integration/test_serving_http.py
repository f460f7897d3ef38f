"""The HTTP API when Cassandra cannot be reached: 503 with the reason, no stack trace.

The app points at a closed port on this machine (a real socket refusing connections,
not a mock); input errors are still answered first, with 422.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from pos_lambda.serving.http import create_app
from pos_lambda.serving.model import Segment
from pos_lambda.serving.requests import PageToken, encode_page
from pos_lambda.settings import Settings

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def test_cassandra_unreachable_gives_503_with_the_reason(settings: Settings) -> None:
    port = _closed_port()
    down = settings.with_overrides(**{"cassandra_port": port, "serve_timeout_seconds": 2.0})
    with TestClient(create_app(down), raise_server_exceptions=False) as http:
        for url in ("/stores/101/windows?start=2026-03-02&end=2026-03-03", "/health",
                    "/days/2026-03-02/top-stores"):  # fmt: skip
            r = http.get(url)
            assert r.status_code == 503, (url, r.text)
            detail = r.json()["detail"]
            assert detail.startswith(f"Cassandra at 127.0.0.1:{port} is unreachable"), detail
            assert "try `make up`" in detail and "Traceback" not in r.text
        page = http.get("/dashboard")
        assert page.status_code == 503 and "is unreachable" in page.text
        assert "Traceback" not in page.text
        # Bad input is refused before any connection is tried.
        bad = http.get("/stores/101/windows?start=2026-03-03&end=2026-03-02")
        assert bad.status_code == 422


def test_unknown_store_on_an_empty_keyspace_is_404(settings: Settings) -> None:
    with TestClient(create_app(settings)) as http:
        r = http.get("/stores/4242/days", params={"first": "2026-03-02", "last": "2026-03-02"})
        assert (r.status_code, r.json()) == (
            404,
            {"detail": "store 4242 is unknown: no view holds any receipt of it"},
        )
        empty = http.get("/days/2026-03-02/top-stores").json()
        assert (empty["stores"], empty["horizon"]) == ([], None)


@pytest.fixture
def store_102(isolated: tuple[Settings, Any]) -> Iterator[Settings]:
    """A keyspace where store 102 is known: one speed aggregate row, as the speed layer
    writes it (a store no view holds is a 404 before any page token is looked at)."""
    s, cql = isolated
    cql.execute(
        "INSERT INTO agg_15m_speed (operation_id, day, window_start, receipt_count, "
        "item_quantity, revenue, late_count) VALUES (102, '2026-03-02', "
        "'2026-03-02T08:00:00Z', 1, 2, 3.80, 0)"
    )
    yield s.with_overrides(**{"serve_page_key": SecretStr("integration-test-key")})


def _unsigned(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_hostile_requests_get_422_never_a_5xx(store_102: Settings) -> None:
    """The six requests of issue 47 that answered 500, against the real Cassandra."""
    receipts = "/stores/102/days/2026-03-02/receipts"
    # A token signed with the server's key (so it passes the check) whose paging state
    # Cassandra itself refuses: the defence behind the signature.
    key = hashlib.sha256(b"integration-test-key").digest()
    stale = encode_page(
        PageToken((Segment("speed", date(2026, 3, 2), datetime(2026, 3, 2, tzinfo=UTC),
                           datetime(2026, 3, 3, tzinfo=UTC)),), 0, b"\xde\xad\xbe\xef", 102,
                  date(2026, 3, 2), issued_at=datetime.now(UTC)),
        key,
    )  # fmt: skip
    with TestClient(create_app(store_102), raise_server_exceptions=False) as http:
        assert http.get(receipts).status_code == 200  # the store is known, the route works

        def refused(url: str) -> str:
            r = http.get(url)
            assert r.status_code == 422, (url, r.status_code, r.text)
            return str(r.json()["detail"])

        assert refused("/stores/102/windows?start=0001-01-01T00:00:00%2B01:00&end=2026-11-25") == (
            "start '0001-01-01T00:00:00+01:00' is outside the data's years: an instant is "
            "2000-01-01T00:00:00+00:00..2100-01-01T00:00:00+00:00"
        )
        assert refused("/stores/102/days?first=9999-12-31&last=9999-12-31") == (
            "first 9999-12-31 is outside the data's years: a day is 2000-01-01..2099-12-31"
        )
        assert refused("/days/9999-12-31/top-stores") == (
            "day 9999-12-31 is outside the data's years: a day is 2000-01-01..2099-12-31"
        )
        page = http.get("/dashboard?day=0001-01-01")
        assert page.status_code == 422, page.text
        assert "day 0001-01-01 is outside the data&#39;s years" in page.text
        not_ours = "page is not a token this API returned: pass next_page of the previous answer"
        assert refused(f"{receipts}?page={_unsigned(b'[' * 1100)}") == not_ours
        forged = _unsigned(b'{"p":"speed","s":"deadbeef","t":"2026-03-02T00:00:00+00:00","v":null}')
        assert refused(f"{receipts}?page={forged}") == not_ours
        assert refused(f"{receipts}?page={stale}").startswith("page is no longer valid (")
