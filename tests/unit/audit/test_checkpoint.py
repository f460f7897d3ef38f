"""What the speed layer has processed, from its checkpoint's files (literal layout)."""

from __future__ import annotations

from pathlib import Path

from pos_lambda.audit.readers import speed_processed
from pos_lambda.settings import load_settings

META = '{"batchWatermarkMs":0,"batchTimestampMs":1795416261149,"conf":{}}'


def _checkpoint(data: Path, offsets: dict[int, str], commits: list[int]) -> None:
    root = data / "checkpoints" / "views"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for n, source in offsets.items():
        (root / "offsets" / str(n)).write_text(f"v1\n{META}\n{source}\n")
    for n in commits:
        (root / "commits" / str(n)).write_text("v1\n{}\n")


def test_offsets_of_the_last_committed_batch(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    _checkpoint(
        tmp_path,
        {
            0: '{"pos.t":{"0":10,"1":7}}',
            1: '{"pos.t":{"1":9,"0":12}}',
            2: '{"pos.t":{"0":99,"1":99}}',  # planned, not committed: not processed
        },
        commits=[0, 1],
    )
    assert speed_processed(settings, "pos.t") == {0: 12, 1: 9}
    assert speed_processed(settings, "other.topic") is None


def test_no_checkpoint_means_unknown(tmp_path: Path) -> None:
    assert speed_processed(load_settings(data_dir=tmp_path), "pos.t") is None
