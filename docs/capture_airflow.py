"""Walk through the Airflow UI as a new user would, and keep screenshots.

    make airflow                       # prints the URL and login this script also uses
    python docs/capture_airflow.py [--out docs]

Headless Chromium (Debian's `chromium`) driven by Playwright (`pip install -e .[docs]`):
open the UI, log in with the printed login, open `pos_batch`, press "Trigger" (a single
run, interval inferred from the timetable: the last complete hour), wait until the run
ends (polled through the REST API), and screenshot the run. Exits 1 if the run failed.
Needs a master dataset to read (`make demo` writes one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from pos_lambda.settings import load_settings
from pos_lambda_dev.runtime import airflow_service

DAG_ID = "pos_batch"
CHROMIUM = "/usr/bin/chromium"


def _api(base: str, path: str, token: str | None = None, body: Any = None) -> Any:
    req = urllib.request.Request(
        f"{base}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def _latest_run(base: str, token: str) -> dict[str, Any] | None:
    runs = _api(base, f"/api/v2/dags/{DAG_ID}/dagRuns?order_by=-run_after&limit=1", token)
    return runs["dag_runs"][0] if runs["dag_runs"] else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="screenshot directory")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to await the run")
    args = parser.parse_args()
    settings = load_settings()
    base = airflow_service.base_url(settings)
    creds = airflow_service.login(settings)
    if not airflow_service.is_ready(settings) or creds is None:
        print(f"Airflow is not running at {base}: start it with `make airflow`", file=sys.stderr)
        return 2
    user, password = creds
    token = _api(base, "/auth/token", body={"username": user, "password": password})["access_token"]
    before = _latest_run(base, token)

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(base)  # redirects to the login form
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/", timeout=30_000)
        page.goto(f"{base}/dags/{DAG_ID}")
        page.click("[data-testid=trigger-dag-button]")
        page.click("[data-testid=trigger-dag-submit]")  # "Unpause on trigger" is ticked

        deadline = time.monotonic() + args.timeout
        run = None
        while time.monotonic() < deadline:
            run = _latest_run(base, token)
            fresh = run is not None and (
                before is None or run["dag_run_id"] != before["dag_run_id"]
            )
            if fresh and run is not None and run["state"] in ("success", "failed"):
                break
            time.sleep(3)  # polling a remote state; there is nothing to await locally
        if run is None or run["state"] not in ("success", "failed"):
            print(f"the run did not end within {args.timeout:.0f} s", file=sys.stderr)
            return 1
        print(
            f"{run['dag_run_id']}: {run['state']} over "
            f"[{run['data_interval_start']}, {run['data_interval_end']})"
        )
        page.goto(f"{base}/dags/{DAG_ID}/runs/{run['dag_run_id']}")
        page.wait_for_load_state("networkidle")
        args.out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out / "airflow-pos-batch-run.png"))
        page.goto(f"{base}/dags/{DAG_ID}")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(args.out / "airflow-pos-batch.png"))
        browser.close()
    return 0 if run["state"] == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
