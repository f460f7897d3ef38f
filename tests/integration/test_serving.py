"""The serving layer on data written by the real speed and batch layers (real Kafka,
Spark, Cassandra): merged answers against the producer's ledger, across horizon moves.

Expected values come from the ledger (Python Decimal, by the simulator) or literals.
The module's pipeline runs once (a fixture); the last test moves the horizon.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.batch_layer import job, quality
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig
from pos_lambda.producer.simulation import simulate as run_simulation
from pos_lambda.serving import Serving, cookbook
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings
from pos_lambda.views import windows
from tests.integration.speed_helpers import (
    VENV_BIN,
    device_key,
    env_for,
    ms,
    produce_raw,
    receipt_json,
    send,
)

pytestmark = pytest.mark.integration

DAY = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HORIZON = MIDNIGHT + timedelta(hours=14)  # the first batch run ends mid-day
TEA = {"title": "Tea", "price": "2.50", "amount": 1}
Expected = dict[tuple[int, datetime], tuple[int, int, Decimal, int]]


@dataclass
class Pipeline:
    settings: Settings
    cql: Any
    ledger: Path
    want: Expected  # (store, window_start) -> (receipts, items, revenue, late)
    stores: list[int]
    last_day: date


def _speed(spark: Any, settings: Settings) -> None:
    """Both speed jobs over everything in the topic now, recording progress in
    speed_progress as `pos-speed run` does (the health panel reads it)."""
    from pos_lambda.speed_layer import archiver_job, views_job
    from pos_lambda.speed_layer.cli import _progress_writer
    from pos_lambda.speed_layer.progress import ProgressRecorder

    writer, opened = _progress_writer(settings)
    try:
        recorder = ProgressRecorder(settings.speed_status_file, writer)
        queries = [
            archiver_job.start(spark, settings, available_now=True),
            views_job.start(spark, settings, recorder, available_now=True),
        ]
        for q in queries:
            q.awaitTermination()
            assert q.exception() is None, q.exception()
    finally:
        opened.close()


def _at(h: int, m: int = 0, s: int = 0) -> datetime:
    return MIDNIGHT + timedelta(hours=h, minutes=m, seconds=s)


def _add(want: Expected, store: int, ws: datetime, late: int = 0) -> None:
    n, items, revenue, lates = want.get((store, ws), (0, 0, Decimal("0.00"), 0))
    want[(store, ws)] = (n + 1, items + 2, revenue + Decimal("3.80"), lates + late)


@pytest.fixture(scope="module")
def pipeline(
    spark: Any, services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    from cassandra.cluster import Cluster

    from pos_lambda.adapters import schema_apply
    from tests.integration.conftest import _unique

    tmp = tmp_path_factory.mktemp("serving")
    settings = services.with_overrides(
        **{
            "cassandra_keyspace": _unique("pos_serve"),
            "topic_transactions": _unique("serve.pos"),
            "data_dir": tmp / "data",
        }
    )
    schema_apply.apply_cql(settings)
    schema_apply.create_topics(settings, {settings.topics.transactions: 4})
    ledger = tmp / "ledger"
    result = run_simulation(
        SimulationConfig(
            count=700,
            seed=23,
            start=_at(8),
            stores=4,
            mean_gap_s=60.0,
            faults=FaultConfig(
                resend_rate=0.05, malformed_rate=0.02, late_rate=0.05, late_max_delay_s=7200
            ),
        )
    )
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    send(settings, result.messages)
    want: Expected = dict(ledger_files.expected_aggregates(ledger))
    stores = sorted({s for s, _ in want})
    # A conflict: one receipt of the first store sent twice with different content;
    # the first copy (11:00:05, 2 x 1.90) wins.
    s0 = stores[0]
    produce_raw(
        settings,
        [
            receipt_json(s0, 98, 1, _at(11, 0, 5)),
            receipt_json(s0, 98, 1, _at(11, 0, 5), [TEA]),
        ],
        timestamps=[ms(_at(11, 0, 10)), ms(_at(11, 0, 20))],
        keys=[device_key(s0, 98)] * 2,
    )
    _add(want, s0, _at(11))
    _speed(spark, settings)
    job.run(spark, settings, Interval(MIDNIGHT, HORIZON))
    quality.check(spark, settings, Interval(MIDNIGHT, HORIZON))
    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
    session = cluster.connect(settings.cassandra.keyspace)
    last_day = max(ws.date() for _, ws in want)
    yield Pipeline(settings, session, ledger, want, stores, last_day)
    session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=60)
    cluster.shutdown()


def _merged(serving: Serving, p: Pipeline) -> dict[tuple[int, datetime], Any]:
    """Every store's windows of 2 March .. the ledger's last day, checked for exactly one
    row per window; keyed like the ledger."""
    end = datetime.combine(p.last_day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    out = {}
    for store in p.stores:
        answer = serving.windows(store, MIDNIGHT, end)
        starts = [w.window_start for w in answer.windows]
        assert len(starts) == 96 * ((p.last_day - DAY).days + 1)
        assert starts == sorted(set(starts)), "a window twice or out of order"
        assert starts[0] == MIDNIGHT and starts[-1] == end - windows.WINDOW  # none missing
        out.update({(store, w.window_start): w for w in answer.windows})
    return out


def _values(rows: dict[tuple[int, datetime], Any]) -> Expected:
    return {
        k: (w.receipt_count, w.item_quantity, w.revenue, w.late_count)
        for k, w in rows.items()
        if w.receipt_count
    }


def test_horizon_mid_day_merged_answer_equals_the_ledger(pipeline: Pipeline) -> None:
    p = pipeline
    assert any(ws < HORIZON for _, ws in p.want) and any(ws >= HORIZON for _, ws in p.want)
    with Serving(p.settings) as serving:
        merged = _merged(serving, p)
        assert _values(merged) == p.want
        assert {(w.source, w.final) for (_, ws), w in merged.items() if ws < HORIZON} == {
            ("batch", True)
        }
        assert {(w.source, w.final) for (_, ws), w in merged.items() if ws >= HORIZON} == {
            ("speed", False)
        }
        # Daily totals and the top stores agree with the ledger's sums.
        per_store_day: Counter[tuple[int, date]] = Counter()
        revenue: dict[tuple[int, date], Decimal] = {}
        for (store, ws), (n, _, rev, _) in p.want.items():
            per_store_day[(store, ws.date())] += n
            revenue[(store, ws.date())] = revenue.get((store, ws.date()), Decimal(0)) + rev
        days = serving.daily_totals(p.stores[0], DAY, p.last_day)
        assert [(d.day, d.receipt_count, d.revenue) for d in days if d.receipt_count] == [
            (day, per_store_day[(p.stores[0], day)], revenue[(p.stores[0], day)])
            for day in sorted({d for s, d in per_store_day if s == p.stores[0]})
        ]
        assert not days[0].final  # the batch covered 2 March only up to 14:00
        top = serving.top_stores(DAY, 10)
        assert [(t.operation_id, t.revenue) for t in top.stores] == sorted(
            ((s, r) for (s, d), r in revenue.items() if d == DAY), key=lambda sr: (-sr[1], sr[0])
        )
        assert top.horizon == HORIZON


def test_receipts_pages_hold_each_receipt_of_the_store_day_once(pipeline: Pipeline) -> None:
    p = pipeline
    store = p.stores[0]
    expected = {
        k
        for k, r in ledger_files.load_receipts(p.ledger).items()
        if k[0] == store and datetime.fromisoformat(r["happened_at"]).date() == DAY
    } | {(store, 98, 1)}
    seen: list[Any] = []
    page = None
    with Serving(p.settings) as serving:
        for _ in range(1000):
            answer = serving.receipts(store, DAY, page_size=7, page=page)
            assert len(answer.receipts) <= 7
            seen += answer.receipts
            page = answer.next_page
            if page is None:
                break
    keys = [(store, r.vendor_fiscal_module, r.transaction_id) for r in seen]
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert [r.happened_at for r in seen] == sorted(r.happened_at for r in seen)
    assert {r.source for r in seen if r.happened_at < HORIZON} == {"batch"}
    assert {r.source for r in seen if r.happened_at >= HORIZON} == {"speed"}
    conflict = next(r for r in seen if (r.vendor_fiscal_module, r.transaction_id) == (98, 1))
    assert (conflict.revenue, [i.title for i in conflict.line_items]) == (
        Decimal("3.80"),
        ["Espresso"],
    )


def test_http_answers_and_documented_errors(pipeline: Pipeline) -> None:
    p = pipeline
    store = p.stores[0]
    with TestClient(create_app(p.settings)) as http:
        ok = http.get(
            f"/stores/{store}/windows", params={"start": "2026-03-02", "end": "2026-03-03"}
        )
        assert ok.status_code == 200
        rows = ok.json()["windows"]
        assert len(rows) == 96
        got = {
            (store, datetime.fromisoformat(r["window_start"])): (
                r["receipt_count"], r["item_quantity"], Decimal(r["revenue"]), r["late_count"]
            )
            for r in rows
            if r["receipt_count"]
        }  # fmt: skip
        assert got == {k: v for k, v in p.want.items() if k[0] == store and k[1].date() == DAY}
        assert (rows[0]["source"], rows[0]["final"], rows[-1]["source"]) == (
            "batch",
            True,
            "speed",
        )
        assert ok.json()["horizon"] == "2026-03-02T14:00:00Z"

        issues = http.get(f"/stores/{store}/days/2026-03-02/issues").json()
        assert [(c["vendor_fiscal_module"], c["transaction_id"]) for c in issues["conflicts"]] == [
            (98, 1)
        ]
        assert issues["fixes"], "pos-batch quality compared the windows it recomputed"

        health = http.get("/health").json()
        assert health["horizon"] == "2026-03-02T14:00:00Z"
        assert [r["status"] for r in health["batch_runs"]] == ["committed"]
        assert {q["query_name"] for q in health["speed"]} >= {"pos-speed-views"}
        summary = ledger_files.load_summary(p.ledger)
        assert health["dead_letters"]["total"] == summary["faults"]["malformed"]

        page = http.get("/dashboard", params={"store": store, "day": "2026-03-02"})
        assert page.status_code == 200 and page.text.count("<title>") == 1 + 2 * 96
        assert "batch horizon 2026-03-02 14:00 UTC" in page.text
        assert http.get("/openapi.json").json()["paths"].keys() >= {
            "/stores/{store}/windows",
            "/health",
        }

        def error(url: str, **params: Any) -> tuple[int, str]:
            r = http.get(url, params=params)
            return r.status_code, r.json()["detail"]

        windows = f"/stores/{store}/windows"
        assert error("/stores/999999/windows", start="2026-03-02", end="2026-03-03") == (
            404,
            "store 999999 is unknown: no view holds any receipt of it",
        )
        code, detail = error(windows, start="2026-03-03", end="2026-03-02")
        assert code == 422 and detail.startswith("empty or inverted range: start 2026-03-03")
        code, detail = error(windows, start="2026-03-02", end="2026-04-11")
        assert (code, detail) == (
            422,
            "range too large: 40 days from start to end; ask for at most 31 days "
            "(POS_SERVE_MAX_RANGE_DAYS) per request",
        )
        code, detail = error(windows, start="2026-02-30", end="2026-03-02")
        assert (code, detail) == (422, "start '2026-02-30' is not a date: write it as YYYY-MM-DD")
        code, detail = error(windows, start="2026-03-02T08:00:00", end="2026-03-03")
        assert code == 422 and "has no UTC offset" in detail
        code, detail = error("/stores/abc/windows", start="2026-03-02", end="2026-03-03")
        assert code == 422 and detail.startswith("store: Input should be a valid integer")
        assert error(windows)[0] == 422  # start and end missing
        assert error("/days/2026-03-02/top-stores", limit=0)[0] == 422
        assert error(f"/stores/{store}/days/2026-03-02/receipts", page="garbage") == (
            422,
            "page is not a token this API returned: pass next_page of the previous answer",
        )
        assert error(f"/stores/{store}/days", first="2026-03-03", last="2026-03-01")[0] == 422


def test_cli_json_equals_the_ledger(pipeline: Pipeline) -> None:
    p = pipeline
    store = p.stores[1]
    done = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "windows", "--store", str(store), "--start",
         "2026-03-02", "--end", "2026-03-03", "--format", "json"],
        env=env_for(p.settings), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = json.loads(done.stdout)["windows"]
    got = {
        (store, datetime.fromisoformat(r["window_start"])): (
            r["receipt_count"], r["item_quantity"], Decimal(r["revenue"]), r["late_count"]
        )
        for r in rows
        if r["receipt_count"]
    }  # fmt: skip
    assert got == {k: v for k, v in p.want.items() if k[0] == store and k[1].date() == DAY}
    table = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "top", "--day", "2026-03-02"],
        env=env_for(p.settings), capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "operation_id" in table and str(store) in table
    unknown = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "days", "--store", "999999", "--first", "2026-03-02",
         "--last", "2026-03-02"],
        env=env_for(p.settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert unknown.returncode == 3 and "store 999999 is unknown" in unknown.stderr


def test_gaps_cli_equals_the_ledgers_numbers(pipeline: Pipeline) -> None:
    """`pos-serve gaps` on a day the batch covers in part (to 14:00): provisional, from
    the speed view; each device's numbers as the ledger's receipts of that UTC day give
    them (the simulator numbers consecutively and loses nothing here: no hole)."""
    p = pipeline
    store = p.stores[1]
    done = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "gaps", "--store", str(store), "--day", "2026-03-02",
         "--json"],
        env=env_for(p.settings), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    answer = json.loads(done.stdout)
    numbers: dict[int, list[int]] = {}
    for r in ledger_files.load_receipts(p.ledger).values():
        if r["operation_id"] == store and r["happened_at"].startswith("2026-03-02"):
            numbers.setdefault(r["vendor_fiscal_module"], []).append(r["transaction_id"])
    assert answer["basis"] == "provisional"
    assert [(d["device"], d["first"], d["last"], d["receipts"], d["missing"])
            for d in answer["devices"]] == [
        (device, min(ns), max(ns), len(ns), []) for device, ns in sorted(numbers.items())
    ]  # fmt: skip
    assert all(max(ns) - min(ns) + 1 == len(ns) for ns in numbers.values())


def test_cookbook_queries_run_against_the_views(pipeline: Pipeline) -> None:
    p = pipeline
    version = p.cql.execute(
        "SELECT version FROM batch_views WHERE view_name = 'batch' AND day = '2026-03-02'"
    ).one()
    generation = p.cql.execute(
        "SELECT generation FROM batch_views WHERE view_name = 'batch' LIMIT 1"
    ).one()
    partition = p.cql.execute("SELECT DISTINCT kafka_topic, kafka_partition FROM dead_letters")
    receipt = p.cql.execute(
        "SELECT vendor_fiscal_module, transaction_id FROM receipts_by_store_day "
        "WHERE operation_id = %s AND day = '2026-03-02' LIMIT 1",
        (p.stores[0],),
    ).one()
    values = {
        "keyspace": p.settings.cassandra.keyspace,
        "store": p.stores[0],
        "day": "2026-03-02",
        "version": version.version,
        "generation": generation.generation,
        "topic": p.settings.topics.transactions,
        "partition": partition.one().kafka_partition,
        "device": receipt.vendor_fiscal_module,
        "transaction": receipt.transaction_id,
    }
    for recipe, statement in zip(cookbook.RECIPES, cookbook.statements(values), strict=True):
        rows = p.cql.execute(statement).all()
        assert rows, f"no rows for: {recipe.title}\n{statement}"


def test_late_receipts_converge_when_the_next_run_moves_the_horizon(
    spark: Any, pipeline: Pipeline
) -> None:
    """Runs last: it moves the horizon. A receipt late but within the speed bound shows
    in the speed view at once but not in a batch-owned window until the next run; one
    beyond the bound only the batch ever sees. The next run shifts sources to batch and
    changes no other value."""
    p, store = pipeline, pipeline.stores[0]
    with Serving(p.settings) as serving:
        before = _merged(serving, p)
        produce_raw(
            p.settings,
            [receipt_json(store, 97, 1, _at(9, 7)), receipt_json(store, 97, 2, _at(10, 20))],
            timestamps=[ms(_at(14, 20)), ms(_at(10, 20) + timedelta(hours=49))],
            keys=[device_key(store, 97)] * 2,
        )
        _speed(spark, p.settings)
        speed_0900 = p.cql.execute(
            "SELECT receipt_count FROM agg_15m_speed WHERE operation_id = %s AND day = %s "
            "AND window_start = %s",
            (store, DAY, _at(9)),
        ).one()
        assert speed_0900.receipt_count == p.want.get((store, _at(9)), (0,))[0] + 1
        # Still the batch's value in its windows: nothing moved before the next run.
        assert _values(_merged(serving, p)) == p.want

        job.run(spark, p.settings, Interval(HORIZON, MIDNIGHT + timedelta(days=1)))
        quality.check(spark, p.settings, Interval(HORIZON, MIDNIGHT + timedelta(days=1)))
        after = _merged(serving, p)
        want = dict(p.want)
        _add(want, store, _at(9), late=1)
        _add(want, store, _at(10, 15), late=1)
        assert _values(after) == want
        moved = {k for k in after if before[k].source == "speed" and k[1].date() == DAY}
        assert moved == {k for k in after if k[1].date() == DAY and k[1] >= HORIZON}
        assert {after[k].source for k in moved} == {"batch"}
        changed = {k for k in after if _values({k: after[k]}) != _values({k: before[k]})}
        assert changed == {(store, _at(9)), (store, _at(10, 15))}
        fixed = serving.store_day(store, DAY).fixes
        assert [(f.window_start, f.receipts_fixed) for f in fixed if f.receipts_fixed] == [
            (_at(10, 15), 1)  # beyond the speed bound: only the batch counts it
        ]
        assert all(d.final for d in serving.daily_totals(store, DAY, DAY))
