"""Whether a master dataset exists, from its Delta log's file names (no Spark)."""

from __future__ import annotations

from pathlib import Path

from pos_lambda.adapters import master_dataset
from pos_lambda.settings import load_settings


def _missing(data_dir: Path) -> str | None:
    return master_dataset.missing(load_settings(data_dir=data_dir))


def test_no_directory_an_empty_log_or_data_files_without_a_commit_are_no_master_dataset(
    tmp_path: Path,
) -> None:
    master = tmp_path / "master"
    expected = (
        f"no master dataset yet: {master} holds no Delta commit; the speed layer's "
        "archiver (`pos-speed run`) creates it with its first micro-batch"
    )
    assert _missing(tmp_path) == expected
    # The archiver's first micro-batch writes its data files before its commit.
    (master / "event_day=2026-03-02").mkdir(parents=True)
    (master / "event_day=2026-03-02" / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    assert _missing(tmp_path) == expected
    (master / "_delta_log").mkdir()
    # A commit still being written is a temporary file, not yet <version>.json.
    (master / "_delta_log" / ".00000000000000000000.json.1f2e.tmp").write_text("{}")
    assert _missing(tmp_path) == expected


def test_a_log_with_its_first_commit_is_a_master_dataset(tmp_path: Path) -> None:
    (tmp_path / "master" / "_delta_log").mkdir(parents=True)
    (tmp_path / "master" / "_delta_log" / "00000000000000000000.json").write_text("{}")
    assert _missing(tmp_path) is None
