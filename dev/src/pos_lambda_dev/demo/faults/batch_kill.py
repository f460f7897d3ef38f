"""kill -9 of the batch job mid-write: `pos-batch run` with its crash point after the
receipts, before the aggregates and the pointer (it first waits for the master dataset
if the archiver has not made it yet). Nothing to await: a killed run commits nothing,
its rows are never served; the later runs and the audit prove it."""

from __future__ import annotations

import signal

from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import VENV_BIN, StepFailed, run_logged, tail


class BatchKill(Fault[None]):
    name = "batch_kill"
    label = "kill -9 of the batch job mid-write"
    slots = (5,)
    table_rank = 8

    def strike(self, run: Chaos) -> None:
        start, end = run.interval
        # The job dies mid-write only if it has a master dataset to read.
        run.await_master_dataset()
        env = run.env | {"POS_BATCH_CRASH_POINT": "after_receipts"}
        code = run_logged(
            [str(VENV_BIN / "pos-batch"), "run", "--start", start.isoformat(), "--end",
             end.isoformat()],
            env, run.log("batch-killed"), run.args.step_timeout, "the batch job to be killed",
        )  # fmt: skip
        if code != -signal.SIGKILL:
            raise StepFailed(
                f"the batch job exited {code} instead of dying at its crash point; log "
                f"{run.log('batch-killed')}:\n{tail(run.log('batch-killed'))}"
            )

    def await_recovery(self, run: Chaos, made: None) -> Survived:
        return Survived("killed after writing its receipts, before its aggregates and pointer")


FAULT = BatchKill()
