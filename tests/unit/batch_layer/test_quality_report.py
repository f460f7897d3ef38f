"""The DAG's light `quality` task: which run's check it reports, and when it fails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pos_lambda.batch_layer.quality import QualityResult, run_fields
from pos_lambda.batch_layer.quality_report import QualityNotRecorded, pick, verdict
from pos_lambda.batch_layer.runs import BatchRun

START, END = datetime(2026, 3, 2, 8, tzinfo=UTC), datetime(2026, 3, 2, 9, tzinfo=UTC)
CHECKED = datetime(2026, 3, 2, 9, 3, 10, tzinfo=UTC)


def _run(run_id: str, minute: int, **kw: object) -> BatchRun:
    fields: dict[str, object] = {
        "status": "committed",
        "interval_start": START,
        "interval_end": END,
        "started_at": datetime(2026, 3, 2, 9, minute, tzinfo=UTC),
        **kw,
    }
    return BatchRun(run_id=run_id, **fields)  # type: ignore[arg-type]


def test_the_newest_run_over_exactly_the_interval_is_reported() -> None:
    runs = [
        _run("first-try", 1),
        _run("retry", 4),
        _run("next-hour", 9, interval_start=END, interval_end=END + timedelta(hours=1)),
        _run("wider", 8, interval_start=datetime(2026, 3, 2, 0, tzinfo=UTC)),
    ]
    picked = pick(runs, START, END)
    assert picked is not None and picked.run_id == "retry"
    assert pick([], START, END) is None


def test_a_manual_run_beside_the_recompute_does_not_hide_its_check() -> None:
    # The DAG's recompute (with --quality) started at :01; a `pos-batch run` by hand over
    # the same hours started at :03 and committed first; the recompute committed after
    # it and recorded its check.
    runs = [
        _run("recompute", 1, quality_checked_at=CHECKED, quality_windows=12),
        _run("by-hand", 3),
    ]
    picked = pick(runs, START, END)
    assert picked is not None and picked.run_id == "recompute"
    failed = [_run("recompute", 1, quality_error="timed out"), _run("by-hand", 3)]
    picked = pick(failed, START, END)
    assert picked is not None and picked.run_id == "recompute"


def test_a_recorded_check_is_reported_with_its_figures() -> None:
    run = _run(
        "r1",
        2,
        quality_checked_at=CHECKED,
        quality_windows=302,
        quality_windows_fixed=7,
        quality_missing_days=["2026-03-01"],
    )
    assert verdict(run, START, END) == {
        "run_id": "r1",
        "status": "committed",
        "windows": 302,
        "windows_fixed": 7,
        "missing_days": ["2026-03-01"],
        "checked_at": "2026-03-02T09:03:10+00:00",
    }


def test_no_missing_day_reads_back_as_null_and_is_reported_as_none() -> None:
    # Cassandra stores an empty list as null: quality_checked_at says the check ran.
    run = _run("r1", 2, quality_checked_at=CHECKED, quality_windows=0, quality_windows_fixed=0)
    assert verdict(run, START, END)["missing_days"] == []


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (None, "no batch run over \\[2026-03-02T08:00:00\\+00:00, 2026-03-02T09:00:00\\+00:00\\)"),
        (_run("r1", 2), "run r1 \\(committed\\) .* recorded no quality check"),
        (
            _run("r1", 2, quality_error="OperationTimedOut()"),
            "its views stand, but the quality check failed: OperationTimedOut\\(\\); rerun it "
            "with `pos-batch quality --start 2026-03-02T08:00:00\\+00:00",
        ),
    ],
)
def test_the_task_fails_without_a_successful_check(run: BatchRun | None, message: str) -> None:
    with pytest.raises(QualityNotRecorded, match=message):
        verdict(run, START, END)


def test_the_row_records_a_check_or_why_it_failed() -> None:
    assert run_fields(QualityResult(302, 7, []), None, CHECKED) == {
        "quality_checked_at": CHECKED,
        "quality_windows": 302,
        "quality_windows_fixed": 7,
        "quality_missing_days": [],
        "quality_error": None,
    }
    assert run_fields(None, "boom", CHECKED) == {
        "quality_checked_at": None,
        "quality_error": "boom",
    }
