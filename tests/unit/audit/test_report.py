"""Verdicts, JSON shape and exit codes of the report; the CLI's usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pos_lambda.audit import cli
from pos_lambda.audit.compare import Tally
from pos_lambda.audit.report import AuditReport, ViewResult


def report(*views: ViewResult) -> AuditReport:
    return AuditReport("ledger", "ks", "topic", list(views))


def test_an_exact_view_fails_on_any_discrepancy() -> None:
    for field in ("lost", "duplicated", "wrong"):
        bad = ViewResult("v", exact=True, tally=Tally(expected=1, **{field: 1}))
        assert bad.failed and report(bad).exit_code == 1 and not report(bad).clean
    assert report(ViewResult("v", exact=True, tally=Tally(3, 3))).exit_code == 0


def test_a_view_that_is_not_exact_now_may_miss_rows_but_never_double_or_alter_them() -> None:
    gap = ViewResult("speed", exact=False, tally=Tally(expected=5, observed=3, lost=2))
    assert not gap.failed and report(gap).clean
    assert ViewResult("speed", exact=False, tally=Tally(duplicated=1)).failed
    assert ViewResult("speed", exact=False, tally=Tally(wrong=1)).failed
    assert "reported" in report(gap).table()


def test_skipped_views_fail_only_when_asked_for() -> None:
    skipped = ViewResult("alerts_topic", exact=True, status="skipped", note="never ran")
    assert report(skipped).clean
    skipped.requested = True
    assert not report(skipped).clean


def test_json_shape() -> None:
    t = Tally(expected=2, observed=1, lost=1)
    t.examples.append({"kind": "lost", "key": [1, 2, 3]})
    doc = json.loads(report(ViewResult("raw", exact=True, tally=t, beyond_bound=4)).dumps())
    assert doc == {
        "clean": False,
        "ledger": "ledger",
        "keyspace": "ks",
        "topic": "topic",
        "views": {
            "raw": {
                "exact": True, "expected": 2, "observed": 1, "lost": 1, "duplicated": 0,
                "wrong": 0, "examples": [{"kind": "lost", "key": [1, 2, 3]}],
                "beyond_bound": 4, "status": "checked", "failed": True, "note": "",
            }
        },
    }  # fmt: skip


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--ledger", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "receipts.jsonl").write_text("")
    assert cli.main(["--ledger", str(tmp_path)]) == 2
    assert "faults.jsonl, summary.json missing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["--ledger", str(tmp_path), "--views", "receipts,nope"])
    assert exc.value.code == 2
    assert "unknown view(s) receipts, nope" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "Exit codes" in capsys.readouterr().out
