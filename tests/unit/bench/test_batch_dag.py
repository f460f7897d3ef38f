"""bench/batch_dag.py's pure parts: where a DAG run's time went, the job's JSON line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.batch_dag import job_line, task_log_lines, timeline

RUN = {"queued_at": "2026-11-27T22:34:43.395Z", "end_date": "2026-11-27T22:35:22.536Z"}
TIS = [  # Airflow's records of the `make demo` run before this change, in API order
    {"task_id": "quality", "start_date": "2026-11-27T22:35:11.500Z",
     "end_date": "2026-11-27T22:35:21.765Z"},
    {"task_id": "await_archive", "start_date": "2026-11-27T22:34:44.698Z",
     "end_date": "2026-11-27T22:34:47.112Z"},
    {"task_id": "recompute", "start_date": "2026-11-27T22:34:47.778Z",
     "end_date": "2026-11-27T22:35:10.965Z"},
]  # fmt: skip


def test_a_runs_time_splits_into_its_tasks_and_airflows_share() -> None:
    got = timeline(RUN, TIS)
    want = {
        "total": 39.141,
        "to_first_task": 1.303,
        "between_tasks": 0.666 + 0.535,
        "after_last_task": 0.771,
        "await_archive": 2.414,
        "recompute": 23.187,
        "quality": 10.265,
        "airflow": 39.141 - 2.414 - 23.187 - 10.265,
    }
    assert got.keys() == want.keys()
    assert all(got[k] == pytest.approx(v, abs=1e-6) for k, v in want.items()), got


def test_the_runs_json_line_is_found_among_the_task_log_events(tmp_path: Path) -> None:
    line = {"run_id": "r", "receipts": 5000, "seconds": {"session": 2.5, "run": 19.0}}
    log = tmp_path / "attempt=1.log"
    log.write_text(
        "\n".join(
            [
                json.dumps({"event": "Spark-Submit cmd: spark-submit ..."}),
                "not json",
                json.dumps({"event": json.dumps(line)}),
                json.dumps({"event": "::endgroup::"}),
            ]
        )
    )
    assert job_line(task_log_lines(log)) == line
    with pytest.raises(ValueError, match="no JSON line"):
        job_line(["{}", "done"])
