"""Serving latency: a store-day of 15-minute windows through the HTTP API (wrk against a
running uvicorn) next to the same reads straight through cassandra-driver, one run.

    python bench/serving_latency.py [--seconds 15] [--connections 1] [--stores 20]

1. Seeds its own keyspace with what the layers write for a day: 20 stores, each with a
   committed batch version up to 14:00 (56 windows) and the speed view's 96 windows,
   the pointer row and the horizon. The shape is what matters here, not the layers.
2. Floor: the serving layer's reads for `GET /stores/101/windows` of one day, through
   cassandra-driver with prepared statements and nothing else: the pointer (horizon and
   the day's version, concurrently), then the batch and speed partitions (concurrently).
3. The library (`Serving.windows`, in process): the floor + the merge into 96 rows.
4. HTTP: `pos-serve http` (uvicorn, one process) on POS_SERVE_PORT, loaded by `wrk
   --latency` (Debian's wrk; `make bench` installs it) with `--connections` keep-alive
   connections; p50/p99 from wrk's latency distribution.

Sequential requests by default (one connection, one client loop), so the three are
comparable per request; the report gives p50/p99 and the ratios to the floor, and
writes them to docs/bench/serving_latency.json (bench/results.py; --no-json: don't).
Needs Cassandra (`make up`); drops its keyspace at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import results  # bench/, beside this script

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import wait_for
from pos_lambda.schemas import cql
from pos_lambda.serving import Serving
from pos_lambda.settings import Settings, load_settings

DAY = date(2026, 3, 2)
MIDNIGHT = datetime(2026, 3, 2, tzinfo=UTC)
HORIZON = MIDNIGHT + timedelta(hours=14)
VERSION = "d7-20260228T0000Z-20260302T1400Z"
STORE = 101


def seed(session: Any, stores: int) -> None:
    speed = session.prepare(
        f"INSERT INTO {cql.AGG_SPEED_TABLE} (operation_id, day, window_start, receipt_count, "
        "item_quantity, revenue, late_count) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    batch = session.prepare(
        f"INSERT INTO {cql.AGG_BATCH_TABLE} (operation_id, day, version, window_start, "
        "receipt_count, item_quantity, revenue, late_count, duplicates, conflicts, "
        "beyond_speed_bound) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 0)"
    )
    for store in range(STORE, STORE + stores):
        for i in range(96):
            ws = MIDNIGHT + timedelta(minutes=15 * i)
            n = 5 + (i * 7 + store) % 11
            values = (n, 2 * n, Decimal(n) * Decimal("3.85"), i % 3)
            session.execute(speed, (store, DAY, ws, *values))
            if ws < HORIZON:
                session.execute(batch, (store, DAY, VERSION, ws, *values))
    session.execute(
        f"INSERT INTO {cql.BATCH_POINTER_TABLE} (view_name, day, version, covered_until) "
        "VALUES ('batch', %s, %s, %s)",
        (DAY, VERSION, HORIZON),
    )
    session.execute(
        f"INSERT INTO {cql.BATCH_POINTER_TABLE} (view_name, horizon) VALUES ('batch', %s)",
        (HORIZON,),
    )


def percentiles(seconds: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(seconds, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


def timed_loop(fn: Any, duration: float) -> list[float]:
    for _ in range(50):  # warm-up: connections, prepared statements, caches
        fn()
    out, deadline = [], time.perf_counter() + duration
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def floor(session: Any) -> Any:
    """The serving layer's reads for one store-day, and nothing else."""
    horizon = session.prepare(
        f"SELECT horizon FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = ? LIMIT 1"
    )
    days = session.prepare(
        f"SELECT day, version, covered_until FROM {cql.BATCH_POINTER_TABLE} "
        "WHERE view_name = ? AND day >= ? AND day <= ?"
    )
    speed = session.prepare(
        "SELECT operation_id, window_start, receipt_count, item_quantity, revenue, late_count "
        f"FROM {cql.AGG_SPEED_TABLE} WHERE operation_id = ? AND day = ?"
    )
    batch = session.prepare(
        "SELECT operation_id, window_start, receipt_count, item_quantity, revenue, late_count, "
        f"version FROM {cql.AGG_BATCH_TABLE} WHERE operation_id = ? AND day = ? AND version = ?"
    )

    def once() -> int:
        h = session.execute_async(horizon, ("batch",))
        d = session.execute_async(days, ("batch", DAY, DAY))
        h.result()
        version = d.result().one().version
        s = session.execute_async(speed, (STORE, DAY))
        b = session.execute_async(batch, (STORE, DAY, version))
        return len(list(s.result())) + len(list(b.result()))

    assert once() == 96 + 56
    return once


def wrk(url: str, seconds: int, connections: int) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, requests/s) from wrk's --latency output."""
    out = subprocess.run(
        ["wrk", f"-t{min(connections, 2)}", f"-c{connections}", f"-d{seconds}s", "--latency", url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}

    def pct(p: str) -> float:
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m, out
        return float(m.group(1)) * unit[m.group(2)]

    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors:\n{out}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert rps, out
    return pct("50"), pct("99"), float(rps.group(1))


def start_server(settings: Settings) -> subprocess.Popen[bytes]:
    env = dict(os.environ, POS_CASSANDRA_KEYSPACE=settings.cassandra.keyspace)
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "pos-serve"), "http"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://{settings.bind_host}:{settings.serve.port}/openapi.json"

    def answers() -> bool:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise SystemExit(f"pos-serve http exited: {err[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            return False

    if wait_for(answers, timeout=60, interval=0.2):
        return proc
    proc.terminate()
    raise SystemExit("pos-serve http did not answer within 60 s")


def port_free(settings: Settings) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex((settings.bind_host, settings.serve.port)) != 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=15, help="per measurement")
    parser.add_argument("--connections", type=int, default=1, help="wrk connections")
    parser.add_argument("--stores", type=int, default=20)
    results.add_json_argument(parser, "serving_latency")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: bash infra/system-deps.sh wrk (make bench does it)")
    settings = load_settings().with_overrides(
        **{"cassandra_keyspace": f"bench_serve_{uuid.uuid4().hex[:8]}"}
    )
    if not port_free(settings):
        raise SystemExit(
            f"port {settings.serve.port} is taken (a `make serve`?): stop it or set POS_SERVE_PORT"
        )
    from cassandra.cluster import Cluster

    schema_apply.apply_cql(settings)
    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
    session = cluster.connect(settings.cassandra.keyspace)
    server = None
    try:
        seed(session, args.stores)
        driver_s = timed_loop(floor(session), args.seconds)
        driver = percentiles(driver_s)
        with Serving(settings) as lib:
            answer = lib.windows(STORE, MIDNIGHT, MIDNIGHT + timedelta(days=1))
            assert [w.source for w in answer.windows] == ["batch"] * 56 + ["speed"] * 40
            library_s = timed_loop(
                lambda: lib.windows(STORE, MIDNIGHT, MIDNIGHT + timedelta(days=1)),
                args.seconds,
            )
            library = percentiles(library_s)
        server = start_server(settings)
        url = (
            f"http://{settings.bind_host}:{settings.serve.port}/stores/{STORE}/windows"
            "?start=2026-03-02T00:00:00Z&end=2026-03-03T00:00:00Z"
        )
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.status == 200
        wrk(url, 2, args.connections)  # warm-up
        http50, http99, rps = wrk(url, args.seconds, args.connections)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=60)
        cluster.shutdown()
    print(
        f"serving latency, one store-day (96 windows: 56 batch + 40 speed), {args.seconds} s each"
    )
    print(f"  cassandra-driver floor (4 reads)  p50 {driver[0]:6.2f} ms  p99 {driver[1]:6.2f} ms")
    print(f"  library Serving.windows           p50 {library[0]:6.2f} ms  p99 {library[1]:6.2f} ms")
    print(
        f"  HTTP via wrk, {args.connections} connection(s)       p50 {http50:6.2f} ms  "
        f"p99 {http99:6.2f} ms  ({rps:,.0f} requests/s)"
    )
    print(
        f"  HTTP/floor: p50 {http50 / driver[0]:.2f}, p99 {http99 / driver[1]:.2f}; "
        f"library/floor: p50 {library[0] / driver[0]:.2f}, p99 {library[1] / driver[1]:.2f}"
    )
    floor50, floor99 = "cassandra-driver floor p50", "cassandra-driver floor p99"
    results.write(
        args,
        "serving_latency",
        [
            results.vs_floor("HTTP p50", http50, "ms", floor50, driver[0]),
            results.vs_floor("HTTP p99", http99, "ms", floor99, driver[1]),
            results.vs_floor("library Serving.windows p50", library[0], "ms", floor50, driver[0]),
            results.vs_floor("library Serving.windows p99", library[1], "ms", floor99, driver[1]),
            results.baseline(floor50, driver[0], "ms"),
            results.baseline(floor99, driver[1], "ms"),
            results.baseline("HTTP requests/s", rps, "requests/s"),
        ],
        runs=[
            *(
                {"path": path, "requests": len(xs), "p50_ms": p[0], "p99_ms": p[1]}
                for path, xs, p in (("floor", driver_s, driver), ("library", library_s, library))
            ),
            {"path": "http", "requests_per_s": rps, "p50_ms": http50, "p99_ms": http99},
        ],
        notes=f"one store-day, 96 windows (56 batch + 40 speed), {args.stores} stores seeded; "
        f"{args.seconds} s per measurement, {args.connections} wrk connection(s)",
    )


if __name__ == "__main__":
    main()
