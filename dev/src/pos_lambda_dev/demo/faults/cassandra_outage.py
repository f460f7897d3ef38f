"""Cassandra stopped (kill -9) for --outage-seconds while the stream flows, longer than
the speed layer's restarts of a failed driver ride out: the speed drivers fail and
restart with back-off (their supervisor may give up and be started again by the watch,
as a process manager would); recovered when the views query commits a micro-batch
after the node is back."""

from __future__ import annotations

import time

from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import StepFailed

# The speed layer's supervisor restarts a failed driver at once, then after 2, 4, 8,
# 16 s, 5 times within 10 min (POS_SPEED_MAX_RESTARTS, POS_SPEED_RESTART_*): 90 s
# outlast a micro-batch's retries and some of those restarts (--outage-seconds).
OUTAGE_S = 90


class CassandraOutage(Fault[int]):
    name = "cassandra_outage"
    label = "Cassandra down longer than the speed layer's retries"
    slots = (6,)
    table_rank = 3

    def strike(self, run: Chaos) -> int:
        """The outage itself: the node down for --outage-seconds, the watch keeping the
        processes up meanwhile. The views query's last commit before it."""
        from pos_lambda_dev.runtime import cassandra_service

        if not cassandra_service.process(run.base).kill():
            raise StepFailed("Cassandra is not managed here (no pid file): cannot stop it")
        before = run.last_views_commit()
        run.say(f"fault: Cassandra down for {run.args.outage_seconds} s ...")
        t0 = time.monotonic()
        while time.monotonic() - t0 < run.args.outage_seconds:
            run.check_deadline("the Cassandra outage")
            run.watch()
            time.sleep(0.5)  # the outage's length is the fault itself, not a wait
        return before

    def await_recovery(self, run: Chaos, made: int) -> Survived:
        from pos_lambda_dev.runtime import cassandra_service

        took = cassandra_service.start(run.base)
        back = time.monotonic()
        run.await_views_commit_after(made, "the views query to commit after the outage")
        return Survived(
            f"down {run.args.outage_seconds} s, node back in {took:.0f} s, views committed "
            f"{time.monotonic() - back:.0f} s later"
        )


FAULT = CassandraOutage()
