"""The speed status file: each driver's recorder keeps the other drivers' entries."""

from __future__ import annotations

import json
from pathlib import Path

from pos_lambda.speed_layer.progress import BatchCounts, ProgressRecorder


def test_two_drivers_recording_into_one_status_file_keep_both_queries(tmp_path: Path) -> None:
    status = tmp_path / "speed_status.json"
    archiver, views = ProgressRecorder(status), ProgressRecorder(status)
    archiver.add_counts("pos-speed-archiver", 3, BatchCounts())
    views.add_counts("pos-speed-views", 7, BatchCounts(valid_rows=5, invalid_rows=1))
    views.add_counts("pos-speed-views", 8, BatchCounts(valid_rows=2))
    recorded = json.loads(status.read_text())
    assert set(recorded) == {"pos-speed-archiver", "pos-speed-views"}
    assert recorded["pos-speed-archiver"]["batch_id"] == 3
    assert recorded["pos-speed-views"]["batch_id"] == 8
    assert recorded["pos-speed-views"]["valid_rows"] == 2


def test_a_damaged_status_file_is_replaced_not_fatal(tmp_path: Path) -> None:
    status = tmp_path / "speed_status.json"
    status.write_text('{"pos-speed-views": ')  # a crash from before atomic writes, say
    ProgressRecorder(status).add_counts("pos-speed-views", 1, BatchCounts(valid_rows=1))
    assert json.loads(status.read_text())["pos-speed-views"]["batch_id"] == 1


def test_each_row_carries_its_querys_running_totals_for_the_metrics(tmp_path: Path) -> None:
    status = tmp_path / "speed_status.json"
    views = ProgressRecorder(status)
    views.add_counts("pos-speed-views", 7, BatchCounts(valid_rows=5, invalid_rows=1, conflicts=1))
    views.add_counts("pos-speed-views", 8, BatchCounts(valid_rows=2, late_receipts=1))
    row = json.loads(status.read_text())["pos-speed-views"]
    assert row["valid_rows"] == 2  # the last micro-batch's
    assert row["totals"] == {
        "valid_rows": 7,
        "invalid_rows": 1,
        "resends_absorbed": 0,
        "conflicts": 1,
        "late_receipts": 1,
        "beyond_lateness_bound": 0,
    }


def test_a_query_restarted_in_place_is_counted_in_its_totals(tmp_path: Path) -> None:
    status = tmp_path / "speed_status.json"
    views = ProgressRecorder(status)
    views.add_counts("pos-speed-views", 7, BatchCounts(valid_rows=5))
    # Its micro-batch failed (Cassandra away) and the driver started it again, twice.
    views.restarted_in_place("pos-speed-views")
    views.restarted_in_place("pos-speed-views")
    row = json.loads(status.read_text())["pos-speed-views"]
    assert (row["batch_id"], row["valid_rows"]) == (7, 5)  # the last micro-batch's, kept
    assert row["totals"]["restarts_in_place"] == 2
    assert row["totals"]["valid_rows"] == 5
    # The next micro-batch's row carries the count on.
    views.add_counts("pos-speed-views", 8, BatchCounts(valid_rows=1))
    assert json.loads(status.read_text())["pos-speed-views"]["totals"]["restarts_in_place"] == 2


def test_a_restart_in_place_before_any_micro_batch_is_recorded_too(tmp_path: Path) -> None:
    status = tmp_path / "speed_status.json"
    ProgressRecorder(status).restarted_in_place("pos-speed-archiver")
    row = json.loads(status.read_text())["pos-speed-archiver"]
    assert row["query_name"] == "pos-speed-archiver"
    assert row["totals"] == {"restarts_in_place": 1}
    assert "batch_id" not in row
