"""The auditor fails closed: a piece of missing evidence is "could not audit" (exit 2),
named, before any service is asked; never a report that reads as clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pos_lambda.audit import cli
from pos_lambda.audit import expectations as ex
from pos_lambda.audit.run import missing_evidence
from pos_lambda.settings import load_settings

RECEIPT = {
    "operation_id": 101, "vendor_fiscal_module": 1001, "transaction_id": 1,
    "happened_at": "2026-03-02T08:00:00+00:00", "window_start": "2026-03-02T08:00:00+00:00",
    "item_quantity": 2, "revenue": "3.80", "line_count": 1, "late": False,
    "first_sent_at": "2026-03-02T08:00:01+00:00", "returned_value": "0.00",
}  # fmt: skip
META = '{"batchWatermarkMs":0,"batchTimestampMs":1795416261149,"conf":{}}'


def _ledger(path: Path, receipts: list[dict[str, object]]) -> Path:
    path.mkdir()
    (path / "receipts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    (path / "faults.jsonl").write_text("")
    (path / "summary.json").write_text('{"topic": "pos.t"}')
    return path


def _checkpoint(data: Path) -> None:
    root = data / "checkpoints" / "views"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "offsets" / "0").write_text(f'v1\n{META}\n{{"pos.t":{{"0":1}}}}\n')
    (root / "commits" / "0").write_text("v1\n{}\n")


def test_no_speed_checkpoint_under_pos_data_dir_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _ledger(tmp_path / "ledger", [RECEIPT])
    monkeypatch.setenv("POS_DATA_DIR", str(tmp_path / "elsewhere"))
    assert cli.main(["--ledger", str(ledger), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table, no verdict
    assert captured.err.startswith("pos-audit: could not audit: evidence missing: ")
    assert f"no committed micro-batch of it under {tmp_path}/elsewhere/checkpoints/views" in (
        captured.err
    )
    assert (
        "needed by receipts_by_store_day, receipt_keys, agg_15m_speed, serving_windows, "
        "serving_receipts, serving_gaps" in captured.err
    )


def test_a_ledger_without_messages_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = _ledger(tmp_path / "ledger", [])
    assert cli.main(["--ledger", str(ledger), "--views", "dead_letters", "--quiet"]) == 2
    assert f"the ledger {ledger} holds no messages" in capsys.readouterr().err


def test_views_that_do_not_read_the_speed_layer_need_no_checkpoint(tmp_path: Path) -> None:
    ledger_dir = _ledger(tmp_path / "ledger", [RECEIPT])
    settings = load_settings(data_dir=tmp_path / "data")
    ledger = ex.load(ledger_dir)
    assert missing_evidence(settings, ledger_dir, ledger, "pos.t", ["dead_letters"]) == []
    assert len(missing_evidence(settings, ledger_dir, ledger, "pos.t", ["serving_windows"])) == 1
    _checkpoint(tmp_path / "data")
    assert missing_evidence(settings, ledger_dir, ledger, "pos.t", ["serving_windows"]) == []
    # A checkpoint of another topic is no evidence for this one.
    assert len(missing_evidence(settings, ledger_dir, ledger, "pos.u", ["receipt_keys"])) == 1
