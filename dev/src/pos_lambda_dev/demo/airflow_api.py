"""A small client of Airflow 3's REST API (`/api/v2`): what the demo needs to run the
batch DAG through the real scheduler — log in, await the DAG's parse, trigger a run with
an explicit data interval, (un)pause, read run and task states.

The login is the simple auth manager's admin from `pos-infra airflow up`
(`pos_lambda_dev.runtime.airflow_service.login`); tokens come from `POST /auth/token`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import airflow_service


class AirflowError(RuntimeError):
    pass


class AirflowApi:
    def __init__(self, settings: Settings) -> None:
        self.url = airflow_service.base_url(settings)
        creds = airflow_service.login(settings)
        if creds is None:
            raise AirflowError(
                f"no Airflow login in {airflow_service.paths(settings).passwords}: "
                "start Airflow with `pos-infra airflow up`"
            )
        self.token = ""
        self.token = self.call(
            "POST", "/auth/token", {"username": creds[0], "password": creds[1]}, auth=False
        )["access_token"]

    def call(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
        )
        req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise AirflowError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc

    def dag_parsed(self, dag_id: str) -> bool:
        try:
            return bool(self.call("GET", f"/api/v2/dags/{dag_id}")["dag_id"] == dag_id)
        except (AirflowError, OSError):
            return False

    def parsed_after(self, dag_id: str, at: datetime) -> bool:
        """The dag-processor parsed the DAG after `at` (tz-aware)."""
        parsed = self.call("GET", f"/api/v2/dags/{dag_id}").get("last_parsed_time")
        return parsed is not None and datetime.fromisoformat(parsed) > at

    def request_parse(self, dag_id: str) -> None:
        """Ask the dag-processor to parse the DAG's file now (a priority parsing request),
        rather than at its next turn (every 30 s)."""
        token = self.call("GET", f"/api/v2/dags/{dag_id}")["file_token"]
        self.call("PUT", f"/api/v2/parseDagFile/{token}")

    def runs(self, dag_id: str, states: tuple[str, ...]) -> list[str]:
        """Run ids of the DAG's runs in these states."""
        query = "&".join(f"state={s}" for s in states)
        doc = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{query}&limit=100")
        return [str(r["dag_run_id"]) for r in doc["dag_runs"]]

    def runs_at(self, dag_id: str, logical_date: datetime) -> list[tuple[str, str]]:
        """(run id, state) of the DAG's runs with this logical date (Airflow allows one)."""
        at = urllib.parse.quote(logical_date.isoformat())
        doc = self.call(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns?logical_date_gte={at}&logical_date_lte={at}"
        )
        return [(str(r["dag_run_id"]), str(r["state"])) for r in doc["dag_runs"]]

    def fail_run(self, dag_id: str, run_id: str) -> None:
        """Mark a run failed (its running tasks are stopped): a running run cannot be
        deleted."""
        self.call("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed"})

    def delete_run(self, dag_id: str, run_id: str) -> None:
        req = urllib.request.Request(
            f"{self.url}/api/v2/dags/{dag_id}/dagRuns/{run_id}", method="DELETE"
        )
        req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=30):
                pass  # 204: no body
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise AirflowError(f"DELETE run {run_id}: HTTP {exc.code}: {detail}") from exc

    def is_paused(self, dag_id: str) -> bool:
        return bool(self.call("GET", f"/api/v2/dags/{dag_id}")["is_paused"])

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def trigger(
        self, dag_id: str, run_id: str, start: datetime, end: datetime, conf: dict[str, Any]
    ) -> dict[str, Any]:
        """A run over [start, end) (logical date = end, as the scheduler's own runs)."""
        run: dict[str, Any] = self.call(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            {
                "dag_run_id": run_id,
                "logical_date": end.isoformat(),
                "data_interval_start": start.isoformat(),
                "data_interval_end": end.isoformat(),
                "conf": conf,
            },
        )
        return run

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def tasks(self, dag_id: str, run_id: str) -> list[tuple[str, str, int]]:
        """(task id, state, try number) of the run's task instances."""
        doc = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return [
            (t["task_id"], str(t["state"]), int(t.get("try_number") or 0))
            for t in doc["task_instances"]
        ]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """The run's record: state, queued_at, start_date, end_date, ..."""
        run: dict[str, Any] = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        return run

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's task instances' records: task_id, start_date, end_date, ..."""
        doc = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return list(doc["task_instances"])
