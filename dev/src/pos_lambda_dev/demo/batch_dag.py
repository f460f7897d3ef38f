"""Run the batch layer through its Airflow DAG, as the scheduler runs it, and read back
what the run did (shared by `pos-demo` and `pos-chaos`).

`pos-infra airflow up`'s code starts Airflow unless it runs; a `pos_batch` run over an
explicit data interval is created through the REST API with the caller's POS_* namespace
in its `conf` (`pos_env`, passed to spark-submit by the DAG), the DAG is unpaused if it
was paused (a paused DAG's runs are never scheduled) and the run is awaited until it
succeeds or fails. `restore` pauses it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pos_lambda.adapters.service import wait_for
from pos_lambda.batch_layer.runs import BatchRun
from pos_lambda.settings import Settings
from pos_lambda_dev.demo.airflow_api import AirflowApi
from pos_lambda_dev.demo.steps import StepFailed, await_or_fail, cql_session
from pos_lambda_dev.runtime import airflow_service

DAG_ID = "pos_batch"


@dataclass
class DagRun:
    run_id: str
    start: datetime
    end: datetime
    seconds: float
    tasks: list[tuple[str, str, int]]
    was_paused: bool


def ensure_airflow(settings: Settings, say: Callable[[str], None]) -> bool:
    """Start Airflow unless it answers healthy; True if this call started it."""
    if airflow_service.is_ready(settings):
        say(f"batch: Airflow is running at {airflow_service.base_url(settings)}")
        return False
    logs = airflow_service.paths(settings).root / "logs"
    say(f"batch: starting Airflow (its logs: {logs}) ...")
    took = airflow_service.start(settings)
    say(f"batch: Airflow ready in {took:.0f} s at {airflow_service.base_url(settings)}")
    return True


@dataclass(frozen=True)
class Triggered:
    """A DAG run created through the API, not yet awaited."""

    run_id: str
    start: datetime
    end: datetime
    was_paused: bool  # the DAG was paused before (await_dag pauses it again)


def trigger_dag(
    settings: Settings,
    pos_env: dict[str, str],
    start: datetime,
    end: datetime,
    run_id: str,
    say: Callable[[str], None],
) -> Triggered:
    """Create a run of the DAG over [start, end) through Airflow (started by
    `ensure_airflow`) and make sure the scheduler will run it."""
    api = AirflowApi(settings)
    await_or_fail(lambda: api.dag_parsed(DAG_ID), 300, f"Airflow to parse {DAG_ID}")
    # Airflow keeps one run per logical date: an earlier demo or chaos run of the same
    # interval (or any other run with that logical date, e.g. the scheduler's run of the
    # next hour, whose logical date is its start) must go before a new one. Deleting a
    # run deletes Airflow's record of it, not the views it committed; this run
    # recomputes its interval from the master dataset.
    for old, old_state in api.runs_at(DAG_ID, end):
        if old_state in ("queued", "running"):
            raise StepFailed(
                f"batch: run {old} of this interval is {old_state}; let it finish (or "
                "delete it in the Airflow UI) and start again"
            )
        api.delete_run(DAG_ID, old)
        say(f"batch: deleted the earlier run {old} ({old_state}) of this interval, to run it again")
    triggered_at = datetime.now(UTC)
    api.trigger(DAG_ID, run_id, start, end, {"pos_env": pos_env})
    was_paused = api.is_paused(DAG_ID)
    if was_paused:
        # A paused DAG's runs are never scheduled, and unpausing it makes the scheduler
        # start its latest hourly run too, unless the DAG is known to be at
        # max_active_runs: the dag-processor records that when it parses the DAG again
        # (every 30 s, or at once on request), so unpause only after a parse that saw
        # our run.
        api.request_parse(DAG_ID)
        say(f"batch: awaiting a parse of {DAG_ID} that counts this run (requested) ...")
        if not wait_for(lambda: api.parsed_after(DAG_ID, triggered_at), 120, 1.0):
            say("batch: no new parse in 120 s; Airflow may also run its latest hour")
        api.set_paused(DAG_ID, False)
    say(
        f"batch: triggered {DAG_ID} run {run_id} over [{start:%Y-%m-%d %H:%M}, "
        f"{end:%Y-%m-%d %H:%M}) UTC; awaiting it through Airflow's API ..."
    )
    return Triggered(run_id, start, end, was_paused)


def await_dag(
    settings: Settings,
    run: Triggered,
    say: Callable[[str], None],
    timeout: float,
    until: Callable[[list[tuple[str, str, int]]], bool] | None = None,
) -> DagRun | None:
    """Await the run's success (raises StepFailed if it fails or times out), printing
    its tasks' states as they change. With `until`, return None as soon as `until`
    holds for the tasks (task id, state, try), leaving the run going."""
    api = AirflowApi(settings)
    logs = airflow_service.paths(settings).root / "logs" / f"dag_id={DAG_ID}"
    t0, shown = time.monotonic(), ""
    while (state := api.run_state(DAG_ID, run.run_id)) not in ("success", "failed"):
        if time.monotonic() - t0 > timeout:
            raise StepFailed(
                f"batch: run {run.run_id} still {state} after {timeout:.0f} s; task logs in {logs}"
            )
        now = api.tasks(DAG_ID, run.run_id)
        if until is not None and until(now):
            return None
        tasks = ", ".join(f"{t} {st if st != 'None' else 'waiting'}" for t, st, _ in now) or state
        if tasks != shown:
            say(f"batch: {tasks}")
            shown = tasks
        time.sleep(2.0)  # the API's polling interval, not synchronisation
    took = time.monotonic() - t0
    if run.was_paused:  # as found, before the scheduler starts anything else
        api.set_paused(DAG_ID, True)
    tasks_done = api.tasks(DAG_ID, run.run_id)
    summary = ", ".join(f"{t} {st} (try {n})" for t, st, n in tasks_done)
    if state != "success":
        raise StepFailed(f"batch: run {run.run_id} {state}: {summary}; task logs in {logs}")
    say(f"batch: run {run.run_id} succeeded in {took:.0f} s: {summary}")
    return DagRun(run.run_id, run.start, run.end, took, tasks_done, run.was_paused)


def run_dag(
    settings: Settings,
    pos_env: dict[str, str],
    start: datetime,
    end: datetime,
    run_id: str,
    say: Callable[[str], None],
    timeout: float,
) -> DagRun:
    """Run the DAG over [start, end) through Airflow (started by `ensure_airflow`)."""
    run = await_dag(settings, trigger_dag(settings, pos_env, start, end, run_id, say), say, timeout)
    assert run is not None  # no `until`: awaited to the end
    return run


def restore(settings: Settings, run: DagRun | None, stop_airflow: bool) -> list[str]:
    """Pause the DAG again if it was paused; stop Airflow if asked (whether or not the
    run got as far as a DagRun: the caller asks when it started Airflow)."""
    notes: list[str] = []
    if run is not None and run.was_paused:
        try:
            api = AirflowApi(settings)
            api.set_paused(DAG_ID, True)
            others = [r for r in api.runs(DAG_ID, ("queued", "running")) if r != run.run_id]
            if others:
                notes.append(
                    f"Airflow queued {', '.join(others)} while {DAG_ID} was unpaused; "
                    "it runs when the DAG is unpaused again"
                )
        except Exception as exc:  # Airflow gone: nothing to restore
            notes.append(f"could not pause {DAG_ID} again: {exc}")
    if stop_airflow:
        airflow_service.stop(settings)
    return notes


def fail_unfinished(settings: Settings, run_ids: list[str]) -> list[str]:
    """Mark failed those of `run_ids` still queued or running (a run this process
    triggered and no longer awaits, e.g. after a failure or Ctrl-C): with
    max_active_runs=1 the DAG's next run would wait behind it. Notes for the report."""
    try:
        api = AirflowApi(settings)
        open_runs = set(api.runs(DAG_ID, ("queued", "running")))
        for run_id in run_ids:
            if run_id in open_runs:
                api.fail_run(DAG_ID, run_id)
    except Exception as exc:  # Airflow gone: no run to end
        return [f"could not end the runs {', '.join(run_ids)}: {exc}"]
    ended = [r for r in run_ids if r in open_runs]
    return [f"marked the unfinished run(s) {', '.join(ended)} failed"] if ended else []


def pause_again(settings: Settings) -> list[str]:
    """Pause the DAG (a run that unpaused it ended early); notes for the report."""
    try:
        AirflowApi(settings).set_paused(DAG_ID, True)
    except Exception as exc:  # Airflow gone: nothing to restore
        return [f"could not pause {DAG_ID} again: {exc}"]
    return []


def committed_runs(settings: Settings) -> list[BatchRun]:
    """Every committed `batch_runs` row of the keyspace (written by the job)."""
    from pos_lambda.schemas import cql as tables

    with cql_session(settings) as cql:
        rows = cql.execute(f"SELECT * FROM {tables.BATCH_RUNS_TABLE}", timeout=60)
        return [BatchRun.from_row(r) for r in rows if r.status == "committed"]


def committed_run(settings: Settings, start: datetime, end: datetime) -> BatchRun:
    """The newest committed `batch_runs` row over [start, end) (written by the job)."""
    from pos_lambda.schemas import cql as tables

    with cql_session(settings) as cql:
        rows = [
            r
            for r in cql.execute(f"SELECT * FROM {tables.BATCH_RUNS_TABLE}", timeout=60)
            if r.status == "committed"
            and r.interval_start.replace(tzinfo=UTC) == start
            and r.interval_end.replace(tzinfo=UTC) == end
        ]
    if not rows:
        raise StepFailed(f"batch: no committed run over [{start}, {end}) in batch_runs")
    return BatchRun.from_row(max(rows, key=lambda r: r.finished_at))


def fixes(settings: Settings) -> tuple[int, int]:
    """(windows, receipts) the batch fixed in the speed view, from `batch_fixes`."""
    from pos_lambda.schemas import cql as tables

    with cql_session(settings) as cql:
        rows = list(cql.execute(f"SELECT * FROM {tables.BATCH_FIXES_TABLE}", timeout=60))
    fixed = [f for f in rows if f.receipts_fixed or f.revenue_fixed]
    return len(fixed), sum(int(f.receipts_fixed or 0) for f in fixed)
