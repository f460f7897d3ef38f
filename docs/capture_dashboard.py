"""Open the serving dashboard as a new user would, check what it draws, keep screenshots.

    python docs/capture_dashboard.py --seed          # what `make screenshots-dashboard` runs
    python docs/capture_dashboard.py --url http://127.0.0.1:8000 [--store 103] [--day 2026-03-08]

Headless Chromium (Debian's `chromium`) driven by Playwright (`pip install -e .[docs]`)
opens `/dashboard?store=&day=` (the store's local day) and checks the inline SVG: a bar
per 15-minute window of the local day (92 on New York's spring-forward day), some drawn
from the batch and some from the speed view, the dashed horizon line with its label, the
week-before table and the 7 x 24 hour-of-week heatmap with shaded cells; it saves
`docs/dashboard.png`, then the heatmap alone (`docs/screenshots/dashboard-heatmap.png`),
the gaps panel (its line and a row per till: `docs/screenshots/dashboard-gaps.png`),
follows the local day's "receipts" link (JSON of that local day: its zone, its UTC range,
every receipt inside it; `docs/screenshots/dashboard-local-receipts.png`), then the
"UTC day" toggle, checks 96 bars and saves `docs/screenshots/dashboard-utc-day.png`.
Exits 1 if the page lacks any of them.

`--seed` first writes eleven days of data through the real layers into their own
keyspace (`pos_dashboard`), topic (`pos.dashboard.<timestamp>`) and data dir
(`$POS_STATE_DIR/dashboard`), so nothing else is touched, then serves it with
`pos-serve http` on a free port and stops that server at the end:

1. `pos-producer simulate --store-hours` 12,000 receipts of the catalog's 7 stores (New
   York, Kathmandu, Adelaide, ...; the `stores` table seeded) from 2026-03-01 00:00 UTC,
   following each store's local hours, with resends, late receipts, malformed
   messages and 1 % of receipts lost at the till (holes for the gaps panel);
2. `pos-speed run --available-now`: the speed views and the master dataset;
3. `pos-batch run --start 2026-03-01T00:00Z --end 2026-03-08T16:00Z`: the batch horizon at
   noon in New York on its spring-forward day, so that day shows batch bars before it and
   speed bars after it.

Without `--seed` it opens the server at `--url` (a running `pos-serve http`; the
store defaults to the day's top store, the day to the horizon's).
Needs Kafka and Cassandra (`make up`); `--seed` runs two Spark jobs (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pos_lambda.adapters.service import wait_for
from pos_lambda.serving.dashboard import EMPTY
from pos_lambda.settings import Settings, load_settings

CHROMIUM = "/usr/bin/chromium"
BIN = Path(sys.executable).parent
FIRST_DAY = "2026-03-01"
STORE, DAY = "103", "2026-03-08"  # New York's spring-forward day: 92 windows
ZONE = "America/New_York"
BATCH_END = f"{DAY}T16:00:00Z"
KEYSPACE = "pos_dashboard"
TOPIC_PREFIX = "pos.dashboard."


def _env(settings: Settings) -> dict[str, str]:
    return dict(
        os.environ,
        POS_CASSANDRA_KEYSPACE=settings.cassandra.keyspace,
        POS_TOPIC_TRANSACTIONS=settings.topics.transactions,
        POS_DATA_DIR=str(settings.data_dir),
    )


def _run(settings: Settings, *argv: str) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run([str(BIN / argv[0]), *argv[1:]], env=_env(settings), check=True)


def seed(base: Settings) -> Settings:
    """A fresh keyspace, topic and data dir holding one day written by the real layers."""
    from cassandra.cluster import Cluster
    from confluent_kafka.admin import AdminClient

    from pos_lambda.adapters import kafka_admin, schema_apply

    settings = base.with_overrides(
        **{
            "cassandra_keyspace": KEYSPACE,
            "topic_transactions": f"{TOPIC_PREFIX}{time.strftime('%Y%m%d%H%M%S')}",
            "data_dir": base.state_dir / "dashboard",
        }
    )
    # Start from nothing: the previous seed's keyspace, data dir (checkpoints, master
    # dataset) and topics go; a fresh topic name avoids waiting for a deletion.
    cluster = Cluster(settings.cassandra_contact_points, port=settings.cassandra.port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=120)
    finally:
        cluster.shutdown()
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    old = [
        t
        for t in kafka_admin.existing_topics(settings.bootstrap_servers)
        if t.startswith(TOPIC_PREFIX)
    ]
    if old:
        admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
        for future in admin.delete_topics(old, operation_timeout=30).values():  # type: ignore[attr-defined]
            future.result()
    schema_apply.apply_cql(settings)
    schema_apply.create_topics(settings, {settings.topics.transactions: settings.topics.partitions})

    _run(
        settings,
        "pos-producer", "simulate", "--store-hours", "--stores", "7", "--count", "12000",
        "--mean-gap", "30", "--seed", "7", "--start", f"{FIRST_DAY}T00:00:00+00:00",
        "--ledger", str(settings.data_dir / "ledger"),
        "--resend-rate", "0.006", "--late-rate", "0.02", "--late-max-delay", "7200",
        "--malformed-rate", "0.002", "--lost-at-source-rate", "0.01", "--quiet",
    )  # fmt: skip
    _run(settings, "pos-speed", "run", "--available-now")
    _run(settings, "pos-batch", "run", "--start", f"{FIRST_DAY}T00:00:00Z", "--end", BATCH_END)
    return settings


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/openapi.json", timeout=1):
            return True
    except OSError:
        return False


def start_server(settings: Settings) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port(settings.bind_host)
    url = f"http://{settings.bind_host}:{port}"
    proc = subprocess.Popen(
        [str(BIN / "pos-serve"), "http", "--port", str(port)], env=_env(settings)
    )

    def up() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"pos-serve http exited with {proc.returncode}")
        return _answers(url)

    if not wait_for(up, timeout=60, interval=0.2):
        proc.terminate()
        raise SystemExit(f"pos-serve http did not answer at {url} within 60 s")
    return proc, url


def _check_day(page: Any, want_bars: set[int], problems: list[str]) -> None:
    """The day chart: bars of both sources with revenue, the horizon line and label."""
    chart = page.locator("svg#day-chart")
    bars = chart.locator("rect.bar")

    def drawn(source: str) -> int:  # bars of that source with a visible height
        heights = bars.evaluate_all(
            "(rs, s) => rs.filter(r => r.dataset.source === s).map(r => r.getBBox().height)",
            source,
        )
        return sum(1 for h in heights if h > 0)

    n, batch, speed = bars.count(), drawn("batch"), drawn("speed")
    horizon = chart.locator("line.horizon")
    label = chart.locator("text.horizon-label")
    print(
        f"{page.title()}: {n} bars, {batch} batch and {speed} speed with revenue; "
        f"horizon line {horizon.count()}, label {label.all_text_contents()}"
    )
    if n not in want_bars:
        problems.append(f"{page.title()}: {n} bars, not {' or '.join(map(str, sorted(want_bars)))}")
    if not batch or not speed:
        problems.append(f"bars with revenue: {batch} batch, {speed} speed (want both)")
    if horizon.count() != 1 or label.count() != 1:
        problems.append("no horizon line with its label")
    else:
        box = horizon.bounding_box()
        if box is None or box["height"] < 100:
            problems.append(f"the horizon line is not drawn across the plot: {box}")


def _check_local_extras(page: Any, problems: list[str]) -> None:
    """The week-before table and the heatmap: 168 cells, some shaded, all on screen."""
    rows = page.locator("table#week-before tr")
    if rows.count() != 4:
        problems.append(f"week-before table: {rows.count()} rows, not 4")
    cells = page.locator("svg#heatmap rect.cell")
    fills = cells.evaluate_all("(rs) => rs.map(r => r.getAttribute('fill'))")
    shaded = sum(1 for f in fills if f != EMPTY)
    box = page.locator("svg#heatmap").bounding_box()
    print(f"heatmap: {len(fills)} cells, {shaded} shaded; box {box}")
    if len(fills) != 7 * 24 or shaded < 24:
        problems.append(f"heatmap: {len(fills)} cells, {shaded} shaded (want 168, many shaded)")
    if box is None or box["width"] < 800:
        problems.append(f"heatmap not drawn at full width: {box}")


def _check_gaps(page: Any, shots: Path, problems: list[str]) -> None:
    """The gaps panel: its line, and a row per till; a screenshot of the two."""
    line = page.locator("p#gaps-line")
    tills = page.locator("table#gaps tr")
    if line.count() != 1 or tills.count() < 2:
        problems.append(f"gaps panel: {line.count()} line(s), {tills.count()} table row(s)")
        return
    print(f"gaps: {line.inner_text()}")
    line.scroll_into_view_if_needed()
    box = page.locator("table#gaps").bounding_box()
    top = line.bounding_box()
    if box is not None and top is not None:
        # Boxes are the viewport's; a full-page clip takes the page's coordinates.
        scrolled = page.evaluate("window.scrollY")
        top, box = {**top, "y": top["y"] + scrolled}, {**box, "y": box["y"] + scrolled}
        clip = {
            "x": 0,
            "y": top["y"] - 40,
            "width": 1180,
            "height": box["y"] + box["height"] - top["y"] + 50,
        }
        page.screenshot(path=str(shots / "dashboard-gaps.png"), clip=clip, full_page=True)


def _check_receipts_link(page: Any, zone: str | None, shots: Path, problems: list[str]) -> None:
    """Follow the local day's "receipts" link: a JSON page of that local day (its zone,
    its UTC range, receipts inside it), kept as a screenshot; then back to the page."""
    link = page.locator("#day-links a", has_text="receipts")
    if link.count() != 1:
        problems.append("no link to the day's receipts under the totals")
        return
    link.click()
    page.wait_for_load_state()
    try:
        body = json.loads(page.locator("body").inner_text())
    except ValueError:
        problems.append(f"the receipts link did not answer JSON: {page.url}")
        page.go_back()
        return
    start, end = (datetime.fromisoformat(body[k].replace("Z", "+00:00")) for k in ("start", "end"))
    times = [
        datetime.fromisoformat(r["happened_at"].replace("Z", "+00:00")) for r in body["receipts"]
    ]
    print(f"receipts link: {page.url}: {len(times)} receipts, {body['time_zone']} [{start}, {end})")
    if zone and body["time_zone"] != zone:
        problems.append(f"the receipts link answered zone {body['time_zone']}, not {zone}")
    if not times or not all(start <= t < end for t in times):
        problems.append(f"the receipts link's receipts are not of its local day: {page.url}")
    page.screenshot(path=str(shots / "dashboard-local-receipts.png"))
    page.go_back()
    page.wait_for_load_state()


def local_day_windows(day: str, zone: str) -> int:
    """How many 15-minute windows the local day has, by zoneinfo (the page's answer is
    checked against this, not against itself)."""
    d = date.fromisoformat(day)
    z = ZoneInfo(zone)
    start = datetime.combine(d, clock_time(0), tzinfo=z)
    end = datetime.combine(d + timedelta(days=1), clock_time(0), tzinfo=z)
    return int((end.astimezone(UTC) - start.astimezone(UTC)) / timedelta(minutes=15))


def capture(
    url: str, store: str | None, day: str | None, zone: str | None, out: Path, shots: Path
) -> list[str]:
    """Screenshot the local day, its heatmap and the UTC day; returns what is missing
    from them (empty: all drawn)."""
    from playwright.sync_api import sync_playwright

    query = "&".join(f"{k}={v}" for k, v in (("store", store), ("day", day)) if v)
    page_url = f"{url}/dashboard" + (f"?{query}" if query else "")
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1180, "height": 800})
        response = page.goto(page_url)
        if response is None or response.status != 200:
            problems.append(f"{page_url} answered {response.status if response else 'nothing'}")
        local = {local_day_windows(day, zone)} if day and zone else {92, 96, 100}
        _check_day(page, local, problems)
        _check_local_extras(page, problems)
        out.parent.mkdir(parents=True, exist_ok=True)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        page.locator("svg#heatmap").screenshot(path=str(shots / "dashboard-heatmap.png"))
        _check_gaps(page, shots, problems)
        _check_receipts_link(page, zone, shots, problems)
        toggle = page.locator("a#view-utc")
        if toggle.count() != 1:
            problems.append("no 'UTC day' toggle on the local-day page")
        else:
            toggle.click()
            page.wait_for_load_state()
            if page.locator("a#view-local").count() != 1:
                problems.append("the UTC-day page has no toggle back to the local day")
            _check_day(page, {96}, problems)
            page.screenshot(path=str(shots / "dashboard-utc-day.png"), full_page=True)
        browser.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", action="store_true", help="write 11 days through the layers")
    parser.add_argument("--url", help="a running pos-serve http (default: start one)")
    parser.add_argument("--store", help="store to show (default: the day's top store)")
    parser.add_argument("--day", help="local day YYYY-MM-DD (default: the horizon's)")
    parser.add_argument("--zone", help="the store's zone, to check the day's window count")
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--shots", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args()
    settings = load_settings()
    if args.seed:
        settings = seed(settings)
        args.store, args.day = args.store or STORE, args.day or DAY
        args.zone = args.zone or (ZONE if args.store == STORE else None)
    server = None
    url = args.url
    try:
        if url is None:
            server, url = start_server(settings)
        problems = capture(url.rstrip("/"), args.store, args.day, args.zone, args.out, args.shots)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    for p in problems:
        print(f"dashboard: {p}", file=sys.stderr)
    print(f"saved {args.out}, {args.shots}/dashboard-heatmap.png, dashboard-utc-day.png")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
