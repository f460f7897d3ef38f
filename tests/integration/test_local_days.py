"""Stores as data through the real layers (issue 52): `pos-producer simulate --store-hours`
seeds the `stores` table and sends to Kafka, the Spark speed layer and a batch run fill
Cassandra, and the serving layer's local-day totals, hour-of-week heatmap and
week-before comparison of a store at UTC+05:45 (Asia/Kathmandu) and of one with DST
(America/New_York, spring-forward on 8 March 2026) equal the ledger's sums per
store-local day and local hour. Expected values come from the ledger (the producer's
`local_day` per receipt; local hours from its `happened_at` by zoneinfo) or literals.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

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
ZONES = {KATHMANDU: "Asia/Kathmandu", NEW_YORK: "America/New_York"}  # the catalog's, literal
# Local days the stream covers whole (it runs from 7 March 12:00 UTC to 18 March).
KATHMANDU_DAYS = [date(2026, 3, 8), date(2026, 3, 9)]
NEW_YORK_DAYS = [date(2026, 3, 8), date(2026, 3, 9)]
WEEK = (date(2026, 3, 8), date(2026, 3, 17))  # ten whole local days of both stores


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
        "--count", "2000", "--mean-gap", "200", "--seed", "52", "--resend-rate", "0.05",
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


def _ledger_hours(run: Run, store: int) -> dict[tuple[int, int], tuple[int, int, Decimal]]:
    """(local weekday, local hour) -> (receipts, items, revenue) of the store's unique
    receipts in WEEK, each placed by its own happened_at on the store's wall clock."""
    zone = ZoneInfo(ZONES[store])
    out: dict[tuple[int, int], tuple[int, int, Decimal]] = {}
    for r in ledger_files.load_receipts(run.ledger).values():
        if r["operation_id"] != store:
            continue
        local = datetime.fromisoformat(r["happened_at"]).astimezone(zone)
        assert r["local_day"] == local.date().isoformat()  # the producer agrees with zoneinfo
        if WEEK[0] <= local.date() <= WEEK[1]:
            n, items, revenue = out.get((local.weekday(), local.hour), (0, 0, Decimal("0.00")))
            out[(local.weekday(), local.hour)] = (
                n + 1,
                items + int(r["item_quantity"]),
                revenue + Decimal(r["revenue"]),
            )
    return out


def _cells(cells: list[Any]) -> dict[tuple[int, int], tuple[int, int, Decimal]]:
    """The cells with receipts, as the ledger sums them (dataclasses or JSON dicts)."""
    rows = [c if isinstance(c, dict) else c.__dict__ for c in cells]
    return {
        (c["weekday"], c["hour"]): (c["receipt_count"], c["item_quantity"], Decimal(c["revenue"]))
        for c in rows
        if c["receipt_count"]
    }


def test_hour_of_week_equals_the_ledger_per_local_weekday_and_hour(run: Run) -> None:
    assert run.last_happened > datetime(2026, 3, 18, 4, tzinfo=UTC)  # WEEK whole in both zones
    with Serving(run.settings) as serving:
        for store in (KATHMANDU, NEW_YORK):
            week = serving.hour_of_week(store, *WEEK)
            want = _ledger_hours(run, store)
            assert len(want) > 50  # store hours fill many cells: the test is not vacuous
            assert (week.time_zone, len(week.cells)) == (ZONES[store], 7 * 24)
            assert _cells(week.cells) == want
            assert week.days_per_weekday == [2, 2, 1, 1, 1, 1, 2]  # Sunday 8 .. Tuesday 17
        ny = serving.hour_of_week(NEW_YORK, *WEEK)
    # Sunday 8 March skipped 02:00 EDT: that hour has only 15 March's four windows.
    sunday = {c.hour: c.windows for c in ny.cells if c.weekday == 6}
    assert (sunday[1], sunday[2], sunday[3]) == (8, 4, 8)
    assert sum(c.windows for c in ny.cells) == 10 * 96 - 4


def test_hour_of_week_over_http_and_the_cli(run: Run) -> None:
    want = _ledger_hours(run, KATHMANDU)
    params = {"first": WEEK[0].isoformat(), "last": WEEK[1].isoformat()}
    with TestClient(create_app(run.settings)) as client:
        got = client.get(f"/stores/{KATHMANDU}/hour-of-week", params=params)
        assert got.status_code == 200, got.text
        assert _cells(got.json()["cells"]) == want
        inverted = client.get(
            f"/stores/{KATHMANDU}/hour-of-week",
            params={"first": "2026-03-17", "last": "2026-03-08"},
        )
        assert inverted.status_code == 422 and "inverted range" in inverted.json()["detail"]
        unregistered = client.get("/stores/999/hour-of-week", params=params)
        assert unregistered.status_code == 404
    out = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "hour-of-week", "--store", str(KATHMANDU),
         "--first", WEEK[0].isoformat(), "--last", WEEK[1].isoformat(), "--json"],
        env=env_for(run.settings), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert _cells(json.loads(out.stdout)["cells"]) == want


def _percent(now: int | Decimal, before: int | Decimal) -> Decimal:
    # Exact rational arithmetic, rounded half to even at 0.1 %.
    change = Fraction(Decimal(now) - Decimal(before)) / Fraction(Decimal(before)) * 1000
    return Decimal(round(change)) / 10


def test_a_local_day_against_the_same_weekday_a_week_before_equals_the_ledger(run: Run) -> None:
    want = ledger_files.expected_local_days(run.ledger)
    cases = ((NEW_YORK, date(2026, 3, 15), date(2026, 3, 8)),
             (KATHMANDU, date(2026, 3, 16), date(2026, 3, 9)))  # fmt: skip
    with Serving(run.settings) as serving:
        for store, day, before in cases:
            got = serving.compare_week_before(store, day)
            now, then = want[(store, day)], want[(store, before)]
            assert (got.day.day, got.week_before.day) == (day, before)
            assert (got.day.receipt_count, got.day.revenue) == (now.receipt_count, now.revenue)
            assert (got.week_before.receipt_count, got.week_before.revenue) == (
                then.receipt_count,
                then.revenue,
            )
            assert got.receipt_change_percent == _percent(now.receipt_count, then.receipt_count)
            assert got.revenue_change_percent == _percent(now.revenue, then.revenue)
        ny = serving.compare_week_before(NEW_YORK, date(2026, 3, 15))
    assert (ny.day.windows, ny.week_before.windows) == (96, 92)  # across the DST change
    with TestClient(create_app(run.settings)) as client:
        r = client.get(f"/stores/{KATHMANDU}/local-days/2026-03-16/week-before")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["day"]["receipt_count"], body["week_before"]["receipt_count"]) == (
            want[(KATHMANDU, date(2026, 3, 16))].receipt_count,
            want[(KATHMANDU, date(2026, 3, 9))].receipt_count,
        )
        bad = client.get(f"/stores/{KATHMANDU}/local-days/2026-02-30/week-before")
        assert bad.status_code == 422 and "is not a date" in bad.json()["detail"]
    out = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "week-before", "--store", str(NEW_YORK),
         "--day", "2026-03-15", "--json"],
        env=env_for(run.settings), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["revenue_change_percent"] == str(
        _percent(want[(NEW_YORK, date(2026, 3, 15))].revenue,
                 want[(NEW_YORK, date(2026, 3, 8))].revenue)
    )  # fmt: skip


def test_the_cookbook_reads_a_local_day_as_its_utc_window_range(run: Run) -> None:
    from pos_lambda.adapters import cassandra_client
    from pos_lambda.serving import cookbook

    day = date(2026, 3, 9)  # all speed in Kathmandu: the batch horizon is 8 March 12:00 UTC
    values = {**cookbook.EXAMPLE, "keyspace": run.settings.cassandra.keyspace,
              "store": KATHMANDU, "zone": ZONES[KATHMANDU], "day": day.isoformat()}  # fmt: skip
    registry, one, speed, receipts, pointer = cookbook.statements(
        values, cookbook.LOCAL_DAY_RECIPES
    )
    cluster = cassandra_client.cluster(run.settings)
    try:
        session = cluster.connect()
        assert len(session.execute(registry).all()) == 3
        assert session.execute(one).one().time_zone == ZONES[KATHMANDU]
        windows = session.execute(speed).all()
        assert {w.window_start.replace(tzinfo=UTC) for w in windows} <= {
            datetime(2026, 3, 8, 18, 15, tzinfo=UTC) + n * timedelta(minutes=15) for n in range(96)
        }
        assert sum(w.receipt_count for w in windows) == (
            ledger_files.expected_local_days(run.ledger)[(KATHMANDU, day)].receipt_count
        )
        listed = session.execute(receipts).all()
        assert sorted(
            (r.vendor_fiscal_module, r.transaction_id, str(r.revenue)) for r in listed
        ) == (sorted(_ledger_local_receipts(run, KATHMANDU, day)))
        # The batch answers none of this local day: whatever pointer rows those UTC days
        # have, a window must end by both covered_until and the horizon (8 March 12:00).
        rows = session.execute(pointer).all()
        assert date(2026, 3, 8) in {r.day.date() for r in rows}
        assert all(min(r.covered_until, r.horizon).replace(tzinfo=UTC) <= HORIZON for r in rows)
    finally:
        cluster.shutdown()


def test_the_dashboard_shows_the_local_dst_day_and_the_utc_toggle(run: Run) -> None:
    with TestClient(create_app(run.settings)) as client:
        local = client.get("/dashboard", params={"store": NEW_YORK, "day": "2026-03-08"})
        assert local.status_code == 200, local.text
        html = local.text
        assert "(local day, America/New_York: 92 windows, a DST change)" in html
        assert html.count('<rect class="bar"') == 92 and 'class="horizon"' in html
        assert html.count('<rect class="cell"') == 7 * 24
        assert 'href="/dashboard?store=103&day=2026-03-08&view=utc"' in html
        utc = client.get(
            "/dashboard", params={"store": NEW_YORK, "day": "2026-03-08", "view": "utc"}
        )
        assert utc.status_code == 200 and utc.text.count('<rect class="bar"') == 96
        assert client.get("/dashboard", params={"view": "mars"}).status_code == 422


def _ledger_local_receipts(run: Run, store: int, day: date) -> list[tuple[int, int, str]]:
    """(device, receipt number, revenue) of the store's unique receipts on its local day,
    in time order, from the ledger (the producer's `local_day`)."""
    rows = [
        r for r in ledger_files.load_receipts(run.ledger).values()
        if r["operation_id"] == store and r["local_day"] == day.isoformat()
    ]  # fmt: skip
    rows.sort(key=lambda r: (r["happened_at"], r["vendor_fiscal_module"], r["transaction_id"]))
    return [(r["vendor_fiscal_module"], r["transaction_id"], r["revenue"]) for r in rows]


def _keys(receipts: list[Any]) -> list[tuple[int, int, str]]:
    rows = [r if isinstance(r, dict) else r.__dict__ for r in receipts]
    return [(r["vendor_fiscal_module"], r["transaction_id"], str(r["revenue"])) for r in rows]


def test_a_local_days_receipts_page_through_both_utc_days_and_the_seam(run: Run) -> None:
    # Kathmandu's 8 March is [7 March 18:15, 8 March 18:15) UTC: the batch answers it up
    # to 12:00 UTC (the rest from speed); New York's 8 March is its 23-hour DST day.
    with Serving(run.settings) as serving:
        for store, day in ((KATHMANDU, date(2026, 3, 8)), (NEW_YORK, date(2026, 3, 8))):
            want = _ledger_local_receipts(run, store, day)
            assert len(want) > 20  # not vacuous
            got: list[Any] = []
            sources: set[str] = set()
            page = serving.local_receipts(store, day, page_size=7)
            while True:
                assert page.time_zone == ZONES[store] and len(page.receipts) <= 7
                got += page.receipts
                sources |= {r.source for r in page.receipts}
                if page.next_page is None:
                    break
                page = serving.local_receipts(store, day, page_size=7, page=page.next_page)
            times = [r.happened_at for r in got]
            assert times == sorted(times)
            assert sorted(_keys(got)) == sorted(want)  # each receipt once, none from elsewhere
            if store == KATHMANDU:
                assert (page.start, page.end) == (
                    datetime(2026, 3, 7, 18, 15, tzinfo=UTC),
                    datetime(2026, 3, 8, 18, 15, tzinfo=UTC),
                )
                assert sources == {"batch", "speed"}
                assert all(r.final == (r.happened_at < HORIZON) for r in got)
            else:
                assert page.end - page.start == timedelta(hours=23)


def test_a_local_days_receipts_and_issues_over_http_and_the_cli(run: Run) -> None:
    day = date(2026, 3, 9)
    want = _ledger_local_receipts(run, KATHMANDU, day)
    # The simulator made no conflicting copies here: a local day's issues hold none.
    assert not [f for f in ledger_files.load_faults(run.ledger) if "conflict" in f["kind"]]
    with TestClient(create_app(run.settings)) as client:
        url = f"/stores/{KATHMANDU}/local-days/{day}/receipts"
        got: list[Any] = []
        body = client.get(url, params={"page_size": 50}).json()
        while True:
            got += body["receipts"]
            if body["next_page"] is None:
                break
            body = client.get(url, params={"page_size": 50, "page": body["next_page"]}).json()
        assert body["time_zone"] == "Asia/Kathmandu"
        assert (body["start"], body["end"]) == ("2026-03-08T18:15:00Z", "2026-03-09T18:15:00Z")
        assert sorted(_keys(got)) == sorted(want)
        # A UTC day's token does not page a local day.
        utc = client.get(f"/stores/{KATHMANDU}/days/{day}/receipts", params={"page_size": 1})
        wrong = client.get(url, params={"page": utc.json()["next_page"]})
        assert wrong.status_code == 422 and "not store 102 on local day" in wrong.json()["detail"]
        issues = client.get(f"/stores/{KATHMANDU}/local-days/{day}/issues")
        assert issues.status_code == 200, issues.text
        assert (issues.json()["time_zone"], issues.json()["conflicts"]) == ("Asia/Kathmandu", [])
        assert client.get("/stores/999/local-days/2026-03-09/receipts").status_code == 404
    out = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "receipts", "--store", str(KATHMANDU), "--day",
         day.isoformat(), "--local", "--page-size", "1000", "--json"],
        env=env_for(run.settings), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    page = json.loads(out.stdout)
    assert page["next_page"] is None and sorted(_keys(page["receipts"])) == sorted(want)


def test_a_day_in_progress_compares_the_same_local_hours_a_week_before(run: Run) -> None:
    # Kathmandu, Monday 16 March against 9 March, both up to 13:30 local: the ledger's
    # receipts whose own local wall-clock time (zoneinfo) is before 13:30 on each day.
    zone = ZoneInfo(ZONES[KATHMANDU])

    def morning(day: date) -> tuple[int, Decimal]:
        rows = [
            r for r in ledger_files.load_receipts(run.ledger).values()
            if r["operation_id"] == KATHMANDU
            and (local := datetime.fromisoformat(r["happened_at"]).astimezone(zone)).date() == day
            and local.time() < time(13, 30)
        ]  # fmt: skip
        return len(rows), sum((Decimal(r["revenue"]) for r in rows), Decimal("0.00"))

    now, then = morning(date(2026, 3, 16)), morning(date(2026, 3, 9))
    whole = ledger_files.expected_local_days(run.ledger)[(KATHMANDU, date(2026, 3, 16))]
    assert 0 < now[0] < whole.receipt_count and then[0] > 0  # a real cut, not vacuous
    with TestClient(create_app(run.settings)) as client:
        r = client.get(
            f"/stores/{KATHMANDU}/local-days/2026-03-16/week-before", params={"until": "13:30"}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["until"] == "13:30"
        assert (body["day"]["receipt_count"], Decimal(body["day"]["revenue"])) == now
        got_then = (body["week_before"]["receipt_count"], Decimal(body["week_before"]["revenue"]))
        assert got_then == then
        assert body["receipt_change_percent"] == str(_percent(now[0], then[0]))
        bad = client.get(
            f"/stores/{KATHMANDU}/local-days/2026-03-16/week-before", params={"until": "13:20"}
        )
        assert bad.status_code == 422 and "15-minute boundary" in bad.json()["detail"]
