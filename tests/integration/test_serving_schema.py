"""The whole HTTP API against its own OpenAPI document, property-based (Schemathesis):
every operation, with the document's examples, its boundary values and random inputs,
on the real app backed by the real Cassandra. No answer may be a 5xx, and every answer
(status, content type, body) must be one the document declares.

The keyspace holds a little data (store 101 on 2026-03-02, the document's examples), so
some requests read rows and answer 200, others 404 (an unknown store) or 422. How many
cases ran per operation is printed at the end of the module (and must be more than a
handful: a test that generated nothing would prove nothing).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from pos_lambda.adapters import schema_apply
from pos_lambda.serving import Serving
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings, load_settings

# Schemathesis gives every operation's item one node id: pytest-xdist would run one of
# them only, so `make test` runs this file in its serial part.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

# Per operation: enough to reach the boundaries and a good spread of random values, small
# enough that the module runs in about a minute beside Cassandra on 2 cores.
MAX_EXAMPLES = 50
CASES: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()
FAILED_CHECKS: Counter[str] = Counter()  # by check; every failure also fails the test


def _seed(cql: Any) -> None:
    """Two speed windows of store 101 on 2026-03-02, as the speed layer writes them."""
    for minute, count, items, revenue in ((0, 1, 2, "3.80"), (15, 2, 3, "7.50")):
        cql.execute(
            "INSERT INTO agg_15m_speed (operation_id, day, window_start, receipt_count, "
            "item_quantity, revenue, late_count) VALUES (101, '2026-03-02', %s, %s, %s, %s, 0)",
            (datetime(2026, 3, 2, 8, minute, tzinfo=UTC), count, items, Decimal(revenue)),
        )


# The schema is built at import (Schemathesis parametrizes at collection time); the app
# connects to Cassandra lazily, on its first request, when the fixture below has made
# and filled its keyspace.
SETTINGS = load_settings(cassandra_keyspace=f"pos_schema_{uuid.uuid4().hex[:8]}")
LIB = Serving(SETTINGS)
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(SETTINGS, LIB))


@pytest.fixture(scope="module", autouse=True)
def keyspace(services: Settings) -> Iterator[None]:
    from cassandra.cluster import Cluster

    assert services.cassandra.port == SETTINGS.cassandra.port
    schema_apply.apply_cql(SETTINGS)
    cluster = Cluster(SETTINGS.cassandra_contact_points, port=SETTINGS.cassandra.port)
    cql = cluster.connect(SETTINGS.cassandra.keyspace)
    _seed(cql)
    try:
        yield
    finally:
        LIB.close()
        cql.execute(f"DROP KEYSPACE IF EXISTS {SETTINGS.cassandra.keyspace}", timeout=60)
        cluster.shutdown()


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,  # a Cassandra read on a busy machine; time is not the property here
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_conforms_and_never_answers_5xx(case: Any) -> None:
    CASES[case.operation.label] += 1  # its requests, the probes of other methods included
    # Every default check (no 5xx, documented statuses, content types and bodies, refusal
    # of schema-invalid input, 405 for other methods) but positive_data_acceptance: the
    # document cannot say that 2026-02-30 is no date, that start must precede end, or
    # which page tokens this API signed; those schema-valid requests get the documented
    # 422.
    # The document declares formats (date, date-time, the HH:MM pattern of `until`) and
    # ranges, so most generated requests are well-formed and reach the handlers' own
    # checks and the views instead of bouncing off a parse.
    response = case.call()
    STATUSES[response.status_code] += 1
    try:
        case.validate_response(response, excluded_checks=[positive_data_acceptance])
    except (AssertionError, BaseExceptionGroup) as exc:  # FailureGroup: a BaseExceptionGroup
        for failure in getattr(exc, "exceptions", [exc]):
            FAILED_CHECKS[type(failure).__name__] += 1
        raise


def test_the_run_generated_cases_for_every_operation(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the property test (file order): it did generate, for each operation,
    and its requests got data (200), refusals (422) and unknown stores (404)."""
    with capsys.disabled():
        statuses = dict(sorted(STATUSES.items()))
        server_errors = sum(n for s, n in STATUSES.items() if s >= 500)
        print(
            f"\nschemathesis: {sum(CASES.values())} cases, statuses {statuses}, "
            f"server errors {server_errors}, checks failed {sum(FAILED_CHECKS.values())} "
            f"{dict(FAILED_CHECKS)}"
        )
        for operation, n in sorted(CASES.items()):
            print(f"  {operation}: {n}")
    paths = {f"GET {p}" for p in schema.raw_schema["paths"]}
    assert set(CASES) == paths
    assert min(CASES.values()) >= 25, CASES
    assert STATUSES[200] > 0 and STATUSES[404] > 0 and STATUSES[422] > 0, STATUSES
    assert not [s for s in STATUSES if s >= 500]
    assert not FAILED_CHECKS
