"""Schema version skew in serving: a serving process newer than its keyspace's schema
(an index the keyspace lacks) fails only the routes that read through what is missing,
with the hint to apply the schema; every other route keeps answering.

Real Cassandra. The keyspace is this module's own (created and dropped here, never lent
by the pool): dropping an index breaks it for any later borrower.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import wait_for
from pos_lambda.schemas import cql as tables
from pos_lambda.serving import Serving
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings

pytestmark = pytest.mark.integration

# The index that "which stores sold on day D" reads the speed aggregates through.
DROPPED = f"{tables.AGG_SPEED_TABLE}_by_day"


@pytest.fixture
def skewed(services: Settings) -> Iterator[Settings]:
    """A keyspace of its own with the schema applied, two speed windows of store 101 on
    2026-03-02, and the speed aggregates' `day` index dropped (as a keyspace whose schema
    was not applied after an upgrade lacks it)."""
    from cassandra.cluster import Cluster

    s = services.with_overrides(cassandra_keyspace=f"pos_skew_{uuid.uuid4().hex[:10]}")
    schema_apply.apply_cql(s)
    cluster = Cluster(s.cassandra_contact_points, port=s.cassandra.port)
    try:
        cql = cluster.connect(s.cassandra.keyspace)
        for minute, count, items, revenue in ((0, 1, 2, "3.80"), (15, 2, 3, "7.50")):
            cql.execute(
                f"INSERT INTO {tables.AGG_SPEED_TABLE} (operation_id, day, window_start, "
                "receipt_count, item_quantity, revenue, late_count) "
                "VALUES (101, '2026-03-02', %s, %s, %s, %s, 0)",
                (datetime(2026, 3, 2, 8, minute, tzinfo=UTC), count, items, Decimal(revenue)),
            )
        cql.execute(f"DROP INDEX {DROPPED}", timeout=60)
        yield s
    finally:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}", timeout=60)
        cluster.shutdown()


def _get(http: TestClient, path: str) -> tuple[int, Any]:
    r = http.get(path)
    return r.status_code, r.json()


def test_a_missing_index_fails_only_the_routes_that_read_through_it(skewed: Settings) -> None:
    s = skewed
    where = f"{','.join(s.cassandra_contact_points)}:{s.cassandra.port}"
    with Serving(s) as lib, TestClient(create_app(s, lib)) as http:
        # A store's windows: its own partitions, and `operation_id` (still indexed).
        status, body = _get(
            http, "/stores/101/windows?start=2026-03-02T08:00:00Z&end=2026-03-02T08:30:00Z"
        )
        assert status == 200, body
        assert [(w["receipt_count"], Decimal(w["revenue"])) for w in body["windows"]] == [
            (1, Decimal("3.80")),
            (2, Decimal("7.50")),
        ]
        # The day's stores across stores: through the dropped index.
        status, body = _get(http, "/days/2026-03-02/top-stores")
        assert status == 503, body
        detail = body["detail"]
        assert detail.startswith(
            f"keyspace {s.cassandra.keyspace!r} in Cassandra at {where} lacks what this "
            "request reads (statement speed_all_stores: "
        ), detail
        assert detail.endswith(
            "): the serving layer is newer than the keyspace's schema. Apply the schema "
            "(`make schema`, or `pos-infra schema`; `pos-provision schema` where only the "
            "product is installed), then ask again. Requests that do not need it are "
            "answered meanwhile."
        ), detail
        # Asked again, the same: a statement that failed to prepare is not remembered
        # as prepared, nor does it take the connection down.
        assert _get(http, "/days/2026-03-02/top-stores") == (status, body)
        # And the others keep answering after it.
        status, health = _get(http, "/health")
        assert status == 200, health
        assert (health["horizon"], health["batch_runs"]) == (None, [])
        status, days = _get(http, "/stores/101/days?first=2026-03-02&last=2026-03-02")
        assert status == 200, days
        assert [(d["day"], d["receipt_count"], Decimal(d["revenue"])) for d in days] == [
            ("2026-03-02", 3, Decimal("11.30"))
        ]

        # The schema applied, the same process answers the route (an SAI index is built
        # in the background: await it).
        schema_apply.apply_cql(s)

        def top() -> tuple[int, Any]:
            return _get(http, "/days/2026-03-02/top-stores")

        assert wait_for(lambda: top()[0] == 200, timeout=60, interval=0.5), top()
        assert [
            (r["operation_id"], r["receipt_count"], Decimal(r["revenue"]))
            for r in top()[1]["stores"]
        ] == [(101, 3, Decimal("11.30"))]
