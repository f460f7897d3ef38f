"""The whole HTTP API against its own OpenAPI document, property-based (Schemathesis):
every operation, with the document's examples, its boundary values and random inputs,
on the real app backed by the real Cassandra, with every check Schemathesis has (as
`st run --checks all`). No answer may be a 5xx, every answer (status, content type, body)
must be one the document declares, a request the document calls invalid must be refused,
and one it calls valid must not be: the document declares what each parameter accepts
(the contract's years, the page tokens' shape, the HH:MM grid of `until`). The rules it
can only state in words (a range's order and length, a page token this API signed) are
tests/integration/serving_schema_rules.py: a request that breaks one must get the 422
that names it.

Each run draws a new seed besides two fixed ones (the seeds are printed; set
POS_SCHEMA_SEEDS=1,2 to run those instead, e.g. to replay a failure).

The keyspace holds a little data (store 101 on 2026-03-02, the document's examples), so
some requests read rows and answer 200, others 404 (an unknown store) or 422. How many
cases ran per operation is printed at the end of the module (and must be more than a
handful: a test that generated nothing would prove nothing).
"""

from __future__ import annotations

import os
import random
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
from schemathesis.config import SchemathesisConfig

from pos_lambda.adapters import schema_apply
from pos_lambda.serving import Serving
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings, load_settings
from tests.integration import serving_schema_rules as rules

# Schemathesis gives every operation's item one node id: pytest-xdist would run one of
# them only, so `make test` runs this file in its serial part.
pytestmark = [pytest.mark.integration, pytest.mark.serial]

# Two fixed seeds (each found schema-valid requests refused before the document declared
# the years and the tokens' shape) and one drawn for this run.
SEEDS = [int(s) for s in os.environ.get("POS_SCHEMA_SEEDS", "").split(",") if s.strip()] or [
    1,
    2,
    random.SystemRandom().randrange(2**32),
]
# Per operation and seed: enough to reach the boundaries and a good spread of random
# values, small enough that the module runs in about a minute beside Cassandra on 2 cores.
MAX_EXAMPLES = 25
CASES: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()
FAILED_CHECKS: Counter[str] = Counter()  # by check; every failure also fails the test
REFUSED: Counter[str] = Counter()  # schema-valid requests refused: "<status> <operation>"
REFUSED_EXAMPLE: dict[str, str] = {}  # the first of each: its URL and answer


def _seed(cql: Any) -> None:
    """Two speed windows of store 101 on 2026-03-02, as the speed layer writes them."""
    for minute, count, items, revenue in ((0, 1, 2, "3.80"), (15, 2, 3, "7.50")):
        cql.execute(
            "INSERT INTO agg_15m_speed (operation_id, day, window_start, receipt_count, "
            "item_quantity, revenue, late_count) VALUES (101, '2026-03-02', %s, %s, %s, %s, 0)",
            (datetime(2026, 3, 2, 8, minute, tzinfo=UTC), count, items, Decimal(revenue)),
        )


# The app connects to Cassandra lazily, on its first request, when the fixture below has
# made and filled its keyspace.
SETTINGS = load_settings(cassandra_keyspace=f"pos_schema_{uuid.uuid4().hex[:8]}")
LIB = Serving(SETTINGS)
APP = create_app(SETTINGS, LIB)
assert SETTINGS.serve.max_range_days == rules.MAX_RANGE_DAYS


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


def check(case: Any) -> None:
    """One generated request against the app, judged by every check Schemathesis has."""
    CASES[case.operation.label] += 1  # its requests, the probes of other methods included
    response = case.call()
    STATUSES[response.status_code] += 1
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    rule = rules.broken_rule(case.operation.label, case.query) if positive else None
    documented = rules.refused_as_documented(case, response.status_code, response.text)
    if positive and response.status_code in (410, 422) and documented is None:
        key = f"{response.status_code} {case.operation.label}"
        REFUSED[key] += 1
        REFUSED_EXAMPLE.setdefault(key, f"{response.request.url} -> {response.text[:200]}")
    # A rule the document states in words: the request is refused with the 422 naming it.
    assert rule is None or documented is not None, (rule, response.status_code, response.text)
    try:
        # Every check, positive_data_acceptance included: a request the document calls
        # valid is not refused, except for a rule above (its failure is dropped there).
        case.validate_response(response)
    except (AssertionError, BaseExceptionGroup) as exc:  # FailureGroup: a BaseExceptionGroup
        for failure in getattr(exc, "exceptions", [exc]):
            FAILED_CHECKS[type(failure).__name__] += 1
        raise


def conformance_test(seed: int) -> Any:
    """The property test over every operation, its inputs drawn from `seed`, every check
    on (the config is this one, not the repository's schemathesis.toml; the rules' hook
    is registered by the import above). A schema per seed: Schemathesis's fixture-made
    schemas fail on pytest 9, which has no `Function._nodeid`."""
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", APP, config=SchemathesisConfig(seed=seed)
    )

    @schema.parametrize()
    @hypothesis_settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,  # a Cassandra read on a busy machine; time is not the property here
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    def test(case: Any) -> None:
        check(case)

    return test


for _seed_value in SEEDS:
    globals()[f"test_every_operation_conforms_seed_{_seed_value}"] = conformance_test(_seed_value)


def test_the_run_generated_cases_for_every_operation(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the property test (file order): it did generate, for each operation,
    and its requests got data (200), refusals (422) and unknown stores (404); no request
    the document calls valid was refused but for a rule it states in words."""
    with capsys.disabled():
        statuses = dict(sorted(STATUSES.items()))
        server_errors = sum(n for s, n in STATUSES.items() if s >= 500)
        print(
            f"\nschemathesis: seeds {SEEDS}, {sum(CASES.values())} cases, statuses {statuses}, "
            f"server errors {server_errors}, checks failed {sum(FAILED_CHECKS.values())} "
            f"{dict(FAILED_CHECKS)}, schema-valid requests refused {dict(REFUSED)}, "
            f"refused for a rule stated in words {dict(rules.DROPPED)}"
        )
        for operation, n in sorted(CASES.items()):
            print(f"  {operation}: {n}")
        for key, example in sorted(REFUSED_EXAMPLE.items()):
            print(f"  refused {key} ({REFUSED[key]}x), e.g. {example}")
    paths = {f"GET {p}" for p in APP.openapi()["paths"]}
    assert set(CASES) == paths
    assert min(CASES.values()) >= 25 * len(SEEDS), CASES
    assert STATUSES[200] > 0 and STATUSES[404] > 0 and STATUSES[422] > 0, STATUSES
    assert not [s for s in STATUSES if s >= 500]
    assert not FAILED_CHECKS
    assert not REFUSED
