"""Stop the speed layer under a real Prometheus, and keep a screenshot of the alert firing.

    python docs/capture_prometheus.py          # what `make screenshots-prometheus` runs

Needs Kafka and Cassandra (`make up`). In its own keyspace (`pos_prometheus`), topic
(`pos.prometheus.<timestamp>`) and data dir (`$POS_STATE_DIR/prometheus-capture`), so
nothing else is touched:

1. `pos-producer simulate` 500 receipts with resends and malformed messages;
2. `pos-speed run` (continuous) and `pos-serve http` on free ports, and Debian's
   Prometheus with a temporary data dir, the shipped alert rules
   (infra/prometheus/alert-rules.yml) and a 1 s scrape and evaluation interval;
3. once Prometheus holds the stream's receipts (`pos_speed_input_records_total`), SIGTERM
   to `pos-speed run`; once `PosSpeedLayerDown` fires (after its `for: 1m`, asked through
   the HTTP API), headless Chromium (Debian's `chromium`, Playwright: `pip install -e
   .[docs]`) opens Prometheus' alerts page (the classic UI: Debian's build does not
   package the React one), expands the firing rule and saves
   `docs/prometheus-alerts.png`.

Exits 1 if the page does not show the rule firing. Stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import wait_for
from pos_lambda.settings import load_settings
from pos_lambda_dev.runtime import prometheus_service

CHROMIUM = "/usr/bin/chromium"
BIN = Path(sys.executable).parent
KEYSPACE = "pos_prometheus"
ALERT = "PosSpeedLayerDown"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _value(url: str, promql: str) -> float | None:
    body = _get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _firing(url: str) -> bool:
    alerts = _get(f"{url}/api/v1/alerts")["data"]["alerts"]
    return any(a["labels"]["alertname"] == ALERT and a["state"] == "firing" for a in alerts)


def capture(url: str, out: Path) -> list[str]:
    """Screenshot the alerts page with the rule expanded; what is missing (empty: none)."""
    from playwright.sync_api import sync_playwright

    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # Debian's build serves the classic UI (its React UI is not packaged).
        page.goto(f"{url}/classic/alerts")
        page.locator("b", has_text=ALERT).first.click()  # expand the rule's details
        page.locator("tr.alert_details", has_text="up{job").first.wait_for()
        text = page.inner_text("body").lower()
        for wanted in (f"{ALERT} (1 active)", "firing", "the speed layer (pos-speed run) is down"):
            if wanted.lower() not in text:
                problems.append(f"the alerts page does not show {wanted!r}")
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/prometheus-alerts.png"))
    args = parser.parse_args()
    prometheus_service.ensure_installed()
    base = load_settings()
    topic = f"pos.prometheus.{int(time.time())}"
    speed_port, serve_port, prom_port = _free_port(), _free_port(), _free_port()
    settings = base.with_overrides(
        cassandra_keyspace=KEYSPACE,
        topic_transactions=topic,
        data_dir=base.state_dir / "prometheus-capture",
        speed_metrics_port=speed_port,
        serve_port=serve_port,
        speed_trigger_seconds=1.0,
    )
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    schema_apply.apply_cql(settings)
    schema_apply.create_topics(settings, {topic: 4})
    env = dict(os.environ) | settings.environment()
    subprocess.run(
        [str(BIN / "pos-producer"), "simulate", "--count", "500", "--seed", "5",
         "--topic", topic, "--resend-rate", "0.02", "--malformed-rate", "0.01"],
        env=env, check=True,
    )  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="pos-prometheus-"))
    config = work / "prometheus.yml"
    config.write_text(
        prometheus_service.config(
            {"pos-speed": f"127.0.0.1:{speed_port}", "pos-serving": f"127.0.0.1:{serve_port}"},
            scrape_s=1,
            evaluate_s=1,
        )
    )
    logs = base.state_dir / "prometheus-capture-logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = []
    try:
        for name, argv in (("speed", ["pos-speed", "run"]), ("serve", ["pos-serve", "http"])):
            with open(logs / f"{name}.log", "ab") as log:
                child = subprocess.Popen(
                    [str(BIN / argv[0]), *argv[1:]],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                started.append(child)
        with prometheus_service.running(
            config, work / "tsdb", prom_port, logs / "prometheus.log"
        ) as url:
            print(f"Prometheus at {url}; awaiting the stream's records in its series ...")
            query = 'pos_speed_input_records_total{query="pos-speed-views"}'
            if not wait_for(lambda: (_value(url, query) or 0) >= 500, timeout=600, interval=1):
                print(f"the speed layer's series never reached the stream; logs in {logs}")
                return 1
            started[0].send_signal(signal.SIGTERM)
            started[0].wait(timeout=120)
            print(f"speed layer stopped; awaiting {ALERT} ...")
            if not wait_for(lambda: _firing(url), timeout=180, interval=1):
                print(f"{ALERT} did not fire")
                return 1
            problems = capture(url, args.out)
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print(f"{args.out}: {ALERT} firing")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
