"""kill -9 of the Airflow scheduler's process group (its LocalExecutor workers and the
running recompute's spark-submit with it, as when its container dies) while a DAG run's
recompute runs; the scheduler started again, as a process manager would. Recovered when
the DAG run succeeds: the new scheduler resets the dead one's task (its orphaned-task
check, once the dead scheduler's heartbeat is 30 s old) and runs it again. Airflow is
started for it if it is not running."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pos_lambda_dev.demo import batch_dag
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults import dag_run
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import StepFailed


@dataclass(frozen=True)
class Killed:
    dag_run: batch_dag.Triggered
    attempt: str  # the recompute's try the kill hit
    pid: int  # the scheduler's
    at: float  # monotonic time of the kill


class AirflowSchedulerKill(Fault[Killed]):
    name = "airflow_scheduler_kill"
    label = "kill -9 of the Airflow scheduler during a DAG run"
    slots = (12,)
    table_rank = 9

    def strike(self, run: Chaos) -> Killed:
        from pos_lambda_dev.runtime import airflow_service

        triggered, attempt, _ = dag_run.recomputing(run, "scheduler-kill")
        scheduler = airflow_service.processes(run.base)["scheduler"]
        pid = scheduler.pid()
        if pid is None or not scheduler.kill():
            raise StepFailed("the Airflow scheduler is not managed here: cannot kill it")
        return Killed(triggered, attempt, pid, time.monotonic())

    def await_recovery(self, run: Chaos, made: Killed) -> Survived:
        from pos_lambda_dev.runtime import airflow_service

        run.say(
            f"fault: scheduler pid {made.pid} killed during recompute ({made.attempt}); "
            "starting it again"
        )
        airflow_service.start_component(run.base, "scheduler")
        killed_try = int(made.attempt.removeprefix("try "))

        def recompute_again(tasks: list[tuple[str, str, int]]) -> bool:
            return any(
                t == "recompute" and st == "running" and n > killed_try for t, st, n in tasks
            )

        # "The DAG run going on": the new scheduler has reset the dead one's task and a
        # new try of it runs (the run may also end first, if the reset try was quick).
        resumed = None
        if (
            batch_dag.await_dag(
                run.base, made.dag_run, run.say, run.args.step_timeout, recompute_again
            )
            is None
        ):
            resumed = time.monotonic() - made.at
        done = batch_dag.await_dag(run.base, made.dag_run, run.say, run.args.step_timeout)
        assert done is not None
        tries = ", ".join(f"{t} try {n}" for t, _, n in done.tasks)
        again = f"recompute running again {resumed:.0f} s after the kill; " if resumed else ""
        return Survived(
            f"scheduler pid {made.pid} killed during recompute ({made.attempt}); {again}run "
            f"{made.dag_run.run_id} succeeded ({tries})",
            round(time.monotonic() - made.at, 1),
        )


FAULT = AirflowSchedulerKill()
