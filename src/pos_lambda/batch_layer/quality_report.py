"""The `pos_batch` DAG's `quality` task: report the data-quality check its `recompute`
recorded, without Spark.

The recompute (`pos-batch run --quality`) checks the committed views against the speed
view in its own Spark session and records the result on its `batch_runs` row
(src/pos_lambda/batch_layer/quality.py, `after_run`). This task only reads that row over
CQL: no spark-submit, no JVM, one Spark application per DAG run, and the check still
has a task of its own in the Airflow UI, with its figures in the task's log and XCom.
It fails when the recompute recorded no check for the interval, or a failed one.

`pick` and `verdict` are pure (tested with literal rows); `report` is the shell.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pos_lambda.batch_layer.runs import BatchRun

log = logging.getLogger("pos.batch")

# The recompute's run id is a time UUID from the Spark driver's clock, the DAG run's
# start the scheduler's: runs that started this long before the DAG run count too
# (the CLI allows the same skew for an interval's end). A run of the same interval
# from before that is an earlier DAG run's, never this one's.
CLOCK_SKEW = timedelta(minutes=2)


class QualityNotRecorded(RuntimeError):
    """The recompute recorded no quality check for the interval, or a failed one."""


def pick(runs: Iterable[BatchRun], start: datetime, end: datetime) -> BatchRun | None:
    """The newest run over exactly [start, end) that recorded a check, passed or failed;
    else the newest over it, whose verdict says it recorded none.

    A retried recompute leaves one row per try; the last is the one that got as far as
    the check. A run without --quality over the same hours (`pos-batch run` by hand
    beside the DAG run, found by the chaos run) may start after the recompute and commit
    before it: the newest row is then that one, and the recompute's recorded check is
    the one to report."""
    over = [r for r in runs if r.interval_start == start and r.interval_end == end]
    checked = [r for r in over if r.quality_checked_at is not None or r.quality_error is not None]
    return max(checked or over, key=lambda r: r.started_at or datetime.min, default=None)


def verdict(run: BatchRun | None, start: datetime, end: datetime) -> dict[str, Any]:
    """What the task reports (its XCom); raises QualityNotRecorded when there is nothing
    to report."""
    interval = f"[{start.isoformat()}, {end.isoformat()})"
    rerun = f"`pos-batch quality --start {start.isoformat()} --end {end.isoformat()}`"
    if run is None:
        raise QualityNotRecorded(
            f"no batch run over {interval} recorded since this DAG run started: did the "
            "recompute run `pos-batch run --quality`?"
        )
    if run.quality_error is not None:
        raise QualityNotRecorded(
            f"run {run.run_id} ({run.status}) over {interval}: its views stand, but the "
            f"quality check failed: {run.quality_error}; rerun it with {rerun}"
        )
    if run.quality_checked_at is None:
        raise QualityNotRecorded(
            f"run {run.run_id} ({run.status}) over {interval} recorded no quality check "
            "(killed after its commit, run without --quality, or its keyspace lacks the "
            f"quality_* columns of batch_runs: `pos-infra schema` adds them); run {rerun}"
        )
    return {
        "run_id": run.run_id,
        "status": run.status,
        "windows": run.quality_windows or 0,
        "windows_fixed": run.quality_windows_fixed or 0,
        "missing_days": list(run.quality_missing_days or []),
        "checked_at": run.quality_checked_at.isoformat(),
    }


def report(
    start: str, end: str, since: str, pos_env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The task: the check recorded by the newest run over [start, end) that started
    after `since` (the DAG run's start, ISO-8601), logged and returned."""
    from pos_lambda.batch_layer.await_archive import settings_with
    from pos_lambda.batch_layer.pointer import BatchStore

    lo, hi = datetime.fromisoformat(start), datetime.fromisoformat(end)
    with BatchStore(settings_with(pos_env)) as store:
        runs = store.runs_since(datetime.fromisoformat(since) - CLOCK_SKEW)
    found = verdict(pick(runs, lo, hi), lo, hi)
    log.info(
        "run %s (%s) over [%s, %s): %d store-window(s) compared with the speed view, %d "
        "fixed by the batch (rows in batch_fixes); days without a committed version: %s",
        found["run_id"],
        found["status"],
        start,
        end,
        found["windows"],
        found["windows_fixed"],
        ", ".join(found["missing_days"]) or "none",
    )
    return found
