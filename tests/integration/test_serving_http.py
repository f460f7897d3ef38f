"""The HTTP API when Cassandra cannot be reached: 503 with the reason, no stack trace.

The app points at a closed port on this machine (a real socket refusing connections,
not a mock); input errors are still answered first, with 422.
"""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from infra.settings import Settings
from serving.http import create_app

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def test_cassandra_unreachable_gives_503_with_the_reason(settings: Settings) -> None:
    port = _closed_port()
    down = settings.model_copy(update={"cassandra_port": port, "serve_timeout_seconds": 2.0})
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
