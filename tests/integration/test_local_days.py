"""Stores as data through the real layers (issue 52): `pos-producer simulate --store-hours`
seeds the `stores` table and sends to Kafka, the Spark speed layer and a batch run fill
Cassandra, and the serving layer's local-day totals of a store at UTC+05:45
(Asia/Kathmandu) and of one with DST (America/New_York, spring-forward on 8 March 2026)
equal the ledger's sums per store-local day. Expected values come from the ledger (the
producer's `local_day` per receipt, by zoneinfo) or literals.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.batch_layer import job
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.serving import Serving
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import VENV_BIN, env_for, run_available_now, simulate

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 7, 12, tzinfo=UTC)  # a Saturday; New York springs forward Sunday
HORIZON = datetime(2026, 3, 8, 12, tzinfo=UTC)  # the batch run ends mid local day
KATHMANDU, NEW_YORK = 102, 103  # catalog.STORE_CATALOG's second and third stores
# Local days the stream covers whole (it runs from 7 March 12:00 UTC to 10 March).
KATHMANDU_DAYS = [date(2026, 3, 8), date(2026, 3, 9)]
NEW_YORK_DAYS = [date(2026, 3, 8), date(2026, 3, 9)]


@dataclass
class Run:
    settings: Settings
    ledger: Path
    last_happened: datetime


@pytest.fixture(scope="module")
def run(spark: Any, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    from pos_lambda.adapters import schema_apply
    from tests.integration.conftest import _unique

    tmp = tmp_path_factory.mktemp("local_days")
    s = settings.with_overrides(
        **{
            "cassandra_keyspace": _unique("pos_local"),
            "topic_transactions": _unique("local.pos"),
            "data_dir": tmp / "data",
        }
    )
    schema_apply.apply_cql(s)
    schema_apply.create_topics(s, {s.topics.transactions: 4})
    ledger = tmp / "ledger"
    # The helper's default --start is overridden by the later one (argparse: last wins).
    summary = simulate(
        s, ledger, "--start", START.isoformat(), "--store-hours", "--stores", "3",
        "--count", "2000", "--mean-gap", "60", "--seed", "52", "--resend-rate", "0.05",
        "--late-rate", "0.03", "--late-max-delay", "3600",
    )  # fmt: skip
    assert summary["store_zones"][str(KATHMANDU)] == "Asia/Kathmandu"
    assert summary["delivery"]["status"] == "complete"
    run_available_now(spark, s)
    job.run(spark, s, Interval(START.replace(hour=0), HORIZON))
    last = max(
        datetime.fromisoformat(r["happened_at"])
        for r in ledger_files.load_receipts(ledger).values()
    )
    yield Run(s, ledger, last)
    from pos_lambda.adapters import cassandra_client

    cluster = cassandra_client.cluster(s)
    cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {s.cassandra.keyspace}", timeout=60)
    cluster.shutdown()


def test_the_simulator_seeded_the_stores_table(run: Run) -> None:
    out = subprocess.run(
        [str(VENV_BIN / "pos-stores"), "list", "--json"],
        env=env_for(run.settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    stores = json.loads(out.stdout)
    assert [(s["operation_id"], s["time_zone"]) for s in stores] == [
        (101, "Europe/Bratislava"),
        (102, "Asia/Kathmandu"),
        (103, "America/New_York"),
    ]
    assert stores[1]["opening_hours"]["mon"] == "07:00-21:00"


def test_local_day_totals_equal_the_ledger_per_local_day(run: Run) -> None:
    want = ledger_files.expected_local_days(run.ledger)
    assert run.last_happened > datetime(2026, 3, 10, 4, tzinfo=UTC)  # both stores' days whole
    with Serving(run.settings) as serving:
        for store, days in ((KATHMANDU, KATHMANDU_DAYS), (NEW_YORK, NEW_YORK_DAYS)):
            answer = serving.local_days(store, days[0], days[-1])
            got = {
                (store, d.day): (d.receipt_count, d.item_quantity, d.revenue, d.late_count)
                for d in answer.days
            }
            assert got == {(store, d): tuple(want[(store, d)]) for d in days}
            assert all(d.receipt_count > 0 for d in answer.days)
        kathmandu = serving.local_days(KATHMANDU, date(2026, 3, 8), date(2026, 3, 8)).days[0]
        # 8 March in Kathmandu is [7 March 18:15 UTC, 8 March 18:15 UTC): the batch
        # answers it up to the horizon (12:00 UTC), the speed view after it.
        assert (kathmandu.start, kathmandu.end, kathmandu.windows) == (
            datetime(2026, 3, 7, 18, 15, tzinfo=UTC),
            datetime(2026, 3, 8, 18, 15, tzinfo=UTC),
            96,
        )
        assert (kathmandu.batch_windows, kathmandu.speed_windows) == (71, 25)
        spring = serving.local_days(NEW_YORK, date(2026, 3, 8), date(2026, 3, 8)).days[0]
        assert (spring.start, spring.end, spring.windows) == (
            datetime(2026, 3, 8, 5, tzinfo=UTC),
            datetime(2026, 3, 9, 4, tzinfo=UTC),
            92,
        )


def test_the_http_api_answers_the_dst_day(run: Run) -> None:
    want = ledger_files.expected_local_days(run.ledger)[(NEW_YORK, date(2026, 3, 8))]
    with TestClient(create_app(run.settings)) as client:
        got = client.get(
            f"/stores/{NEW_YORK}/local-days", params={"first": "2026-03-08", "last": "2026-03-08"}
        )
        assert got.status_code == 200, got.text
        [day] = got.json()["days"]
        assert (day["windows"], day["receipt_count"], day["revenue"]) == (
            92,
            want.receipt_count,
            str(want.revenue),
        )
        unknown = client.get("/stores/999/local-days", params={"first": "2026-03-08",
                                                              "last": "2026-03-08"})  # fmt: skip
        assert unknown.status_code == 404
        assert "pos-stores add 999" in unknown.json()["detail"]


def test_every_receipt_of_the_whole_local_days_is_counted_once(run: Run) -> None:
    # Across the store's whole local days, the sums add up to the ledger's receipts of
    # those days: no window lost at a local midnight, none counted twice.
    receipts = ledger_files.load_receipts(run.ledger).values()
    with Serving(run.settings) as serving:
        days = serving.local_days(NEW_YORK, date(2026, 3, 8), date(2026, 3, 9)).days
    in_days = [
        r for r in receipts
        if r["operation_id"] == NEW_YORK and r["local_day"] in ("2026-03-08", "2026-03-09")
    ]  # fmt: skip
    assert sum(d.receipt_count for d in days) == len(in_days)
    assert days[0].end == days[1].start and days[1].end - days[0].start == timedelta(hours=47)
