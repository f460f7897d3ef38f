"""What the Airflow faults share (not a fault): a pos_batch DAG run caught while its
recompute task runs."""

from __future__ import annotations

from datetime import UTC, datetime

from pos_lambda_dev.demo import batch_dag
from pos_lambda_dev.demo.chaos_context import NAMESPACE, Chaos
from pos_lambda_dev.demo.steps import StepFailed


def recomputing(
    run: Chaos, label: str
) -> tuple[batch_dag.Triggered, str, tuple[datetime, datetime]]:
    """A pos_batch DAG run over the hours the stream has passed, through Airflow
    (started first if it is not running), awaited until its recompute task runs: the
    run, its recompute's attempt ("try N"), its hours."""
    run.await_master_dataset()
    if batch_dag.ensure_airflow(run.base, run.say):
        run.airflow_started = True
    start, end = run.passed_hours()
    triggered = batch_dag.trigger_dag(
        run.base, NAMESPACE, start, end, f"chaos-{label}-{datetime.now(UTC):%Y%m%dT%H%M%S}",
        run.say,
    )  # fmt: skip
    run.triggered.append(triggered)
    running: list[str] = []

    def recompute_running(tasks: list[tuple[str, str, int]]) -> bool:
        running[:] = [f"try {n}" for t, st, n in tasks if t == "recompute" and st == "running"]
        return bool(running)

    if batch_dag.await_dag(run.base, triggered, run.say, run.args.step_timeout, recompute_running):
        raise StepFailed(f"DAG run {triggered.run_id} ended before its recompute was seen running")
    return triggered, running[0], (start, end)
