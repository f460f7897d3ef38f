"""The warm-up's synthetic micro-batch (pure data) and its readiness signal."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from pos_lambda.schemas.contract import Invalid, Receipt, parse_message
from pos_lambda.settings import load_settings
from pos_lambda.speed_layer import supervisor, warm_up
from pos_lambda.speed_layer.warm_up import Pass, report, synthetic_records, warm_views

NOW = datetime(2026, 11, 27, 12, 0, 30, tzinfo=UTC)


def test_the_synthetic_micro_batch_takes_every_path_of_the_views_decisions() -> None:
    records = synthetic_records(NOW, first_id=500)
    assert [r[4] for r in records] == [0, 1, 2, 3, 4, 5, 6]  # offsets of partition 0
    assert {r[5] for r in records} == {NOW}  # in Kafka now
    parsed = [parse_message(r[1]) for r in records]
    receipts = [p for p in parsed if isinstance(p, Receipt)]
    assert len(receipts) == 6 and isinstance(parsed[6], Invalid)  # one malformed
    keys = [r.natural_key for r in receipts]
    # Four new receipts in two stores, a resend of the first, a conflict with the second.
    assert keys[:4] == [(900_001, 1, 500), (900_002, 1, 501), (900_001, 1, 502), (900_002, 1, 503)]
    assert records[4][1] == records[0][1]
    assert keys[5] == (900_002, 1, 501) and records[5][1] != records[1][1]
    assert receipts[5].line_items[0].price == Decimal("9.99")
    # A minute old: within the speed views' lateness bound, in the current window.
    assert receipts[0].happened_at == NOW - timedelta(minutes=1)


def test_each_warm_up_brings_new_receipts() -> None:
    first = {r[1] for r in synthetic_records(NOW, first_id=500)}
    later = {r[1] for r in synthetic_records(NOW, first_id=510)}
    assert len(first & later) == 1  # only the malformed value repeats


def test_the_report_names_each_pass_and_the_total() -> None:
    line = report("pos-speed-views", [Pass("first", 2.5), Pass("again", 0.25)])
    assert line == (
        "pos-speed-views warmed up in 2.8 s on synthetic records (first 2.50 s, again 0.25 s)"
    )


def test_the_warm_up_keyspace_is_a_setting_refused_when_not_a_keyspace_name() -> None:
    from pydantic import ValidationError

    assert load_settings().speed.warm_up_keyspace == "pos_warm_up"
    with pytest.raises(ValidationError, match="speed_warm_up_keyspace"):
        load_settings(speed_warm_up_keyspace="no-dashes")


def test_a_driver_reports_ready_once_and_the_supervisor_logs_once_all_are_ready(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = os.pipe()
    monkeypatch.setenv(supervisor.READY_FD_ENV, str(theirs))
    supervisor.report_standing_by()  # a standby first: the pipe stays open
    supervisor.report_ready()  # then, as any driver, ready: the pipe closed
    supervisor.report_ready()  # reported once
    with os.fdopen(ours, "rb") as lines:
        assert list(lines) == [supervisor.STANDING_BY, supervisor.READY]
    assert supervisor.READY_FD_ENV not in os.environ

    caplog.set_level("INFO", logger="pos.speed")
    readiness = supervisor.Readiness(["archiver", "views"])
    readiness.mark(1)  # the views driver
    assert "speed layer ready" not in caplog.text
    readiness.mark(0)  # the archiver's (say, after its restart)
    assert "speed layer ready in" in caplog.text
    assert "archiver; views running" in caplog.text
    readiness.unmark(1)  # the views driver restarts
    readiness.mark(1)
    assert caplog.text.count("speed layer ready in") == 1
    assert "driver (views) ready again after its restart" in caplog.text


def test_a_fresh_checkpoint_warms_up_a_resumed_one_does_not(tmp_path: Path) -> None:
    checkpoint = tmp_path / "views"
    assert warm_up.wanted(True, False, checkpoint)  # no checkpoint yet
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / ".0.crc").write_text("")
    assert warm_up.wanted(True, False, checkpoint)  # started, nothing committed
    (checkpoint / "commits" / "²").write_text("")  # a digit to str.isdigit only
    assert warm_up.wanted(True, False, checkpoint)
    (checkpoint / "commits" / "0").write_text("v1\n")
    assert not warm_up.wanted(True, False, checkpoint)  # resuming: the replay warms it
    assert not warm_up.wanted(True, True, tmp_path / "fresh")  # --available-now never
    assert not warm_up.wanted(False, False, tmp_path / "fresh")  # turned off


class _Frames:
    """A stand-in Spark session: its DataFrames are the rows themselves."""

    def createDataFrame(self, rows: list[tuple[object, ...]], ddl: str) -> object:
        return rows


def test_a_warm_up_cut_short_runs_no_further_pass() -> None:
    routes: list[tuple[bool, bool]] = []
    passes = warm_views(
        _Frames(),
        lambda batch, native, keys: routes.append((native, keys)),
        cut_short=lambda: len(routes) == 2,  # a standby told to take over, after two passes
    )
    assert [p.name for p in passes] == ["backlog route", "small route 1"]
    assert routes == [(True, False), (False, True)]
