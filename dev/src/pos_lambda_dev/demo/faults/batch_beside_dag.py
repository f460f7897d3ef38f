"""`pos-batch run` started by hand over the same hours while a DAG run's recompute
runs: both read the pointer, one commits first; the other must commit after it or be
refused (exit 3, its rows left to gc), never interleave. Recovered when the manual run
has exited and the DAG run has succeeded. Airflow is started for it if it is not
running."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pos_lambda_dev.demo import batch_dag
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults import dag_run
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import VENV_BIN, StepFailed, run_logged, tail


@dataclass(frozen=True)
class Beside:
    dag_run: batch_dag.Triggered
    attempt: str  # the recompute's try the manual run started beside
    manual_exit: int  # 0 committed, 3 refused
    at: float  # monotonic time the manual run started


class BatchBesideDag(Fault[Beside]):
    name = "batch_beside_dag"
    label = "a manual batch run beside the DAG's run of the same hours"
    slots = (13,)
    table_rank = 10

    def strike(self, run: Chaos) -> Beside:
        triggered, attempt, (start, end) = dag_run.recomputing(run, "beside")
        t0 = time.monotonic()
        code = run_logged(
            [str(VENV_BIN / "pos-batch"), "run", "--start", start.isoformat(), "--end",
             end.isoformat()],
            run.env, run.log("batch-beside"), run.args.step_timeout, "the manual batch run",
        )  # fmt: skip
        if code not in (0, 3):
            raise StepFailed(
                f"the manual batch run beside the DAG's exited {code}; log "
                f"{run.log('batch-beside')}:\n{tail(run.log('batch-beside'))}"
            )
        return Beside(triggered, attempt, code, t0)

    def await_recovery(self, run: Chaos, made: Beside) -> Survived:
        done = batch_dag.await_dag(run.base, made.dag_run, run.say, run.args.step_timeout)
        assert done is not None
        manual = (
            "committed"
            if made.manual_exit == 0
            else "refused (exit 3: the other run committed first)"
        )
        tries = ", ".join(f"{t} try {n}" for t, _, n in done.tasks)
        return Survived(
            f"manual run {manual}, started during the DAG's recompute ({made.attempt}); run "
            f"{made.dag_run.run_id} succeeded ({tries})",
            round(time.monotonic() - made.at, 1),
        )


FAULT = BatchBesideDag()
