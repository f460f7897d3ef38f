"""The demo's story, from literal facts to literal text."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pos_lambda_dev.demo import story

AUDIT_DOC = {
    "clean": True,
    "views": {
        "speed_receipts": {
            "exact": True, "expected": 1990, "observed": 1990, "lost": 0, "duplicated": 0,
            "wrong": 0, "examples": [],
        },
        "batch_aggregates": {
            "exact": True, "expected": 310, "observed": 310, "lost": [], "duplicated": [],
            "wrong": [], "examples": [],
        },
        "dead_letters": {
            "exact": False, "expected": 10, "observed": 10, "lost": 0, "duplicated": 0,
            "wrong": 0, "examples": [],
        },
    },
}  # fmt: skip


def facts(audit: story.Audited, alerts: story.AlertsSeen | None = None) -> story.DemoFacts:
    return story.DemoFacts(
        produced=story.Produced(
            unique_receipts=2000, messages=2061, stores=20, devices=49, skewed_devices=47,
            first_happened=datetime(2026, 11, 20, 8, 0, 12, tzinfo=UTC),
            last_happened=datetime(2026, 11, 20, 9, 31, 40, tzinfo=UTC),
            topic="pos.transactions", ledger=".state/demo-ledger",
        ),
        injected=story.Injected(
            resends=12, bursts=40, late=60, beyond_bound=4, bound_hours=48.0, out_of_order=19,
            malformed={"broken_json": 3, "wrong_type": 7}, conflicts=9, clock_skew_max_s=30.0,
        ),
        speed=story.SpeedSeen(
            micro_batches=1, seconds=41.4, valid=2051, invalid=10, resends_absorbed=12,
            conflicts=9, late=56, beyond_bound=4,
        ),
        batch=story.BatchSeen(
            dag_run_id="demo-20261123T091500",
            interval_start=datetime(2026, 11, 20, 8, tzinfo=UTC),
            interval_end=datetime(2026, 11, 20, 10, tzinfo=UTC), lookback_hours=48.0,
            seconds=63.2, input_rows=2061, receipts=2000, duplicates_removed=21, conflicts=9,
            beyond_speed_bound=4, windows_fixed=4, receipts_fixed=4,
        ),
        served=story.Served(
            store=107, day="2026-11-20", windows=7, receipts=131, revenue=Decimal("2210.40"),
            from_batch=7, from_speed=0, final=7,
            horizon=datetime(2026, 11, 20, 10, tzinfo=UTC),
        ),
        audit=audit, alerts=alerts, seconds=252.0, logs=".state/demo",
    )  # fmt: skip


def test_a_clean_run_reads_as_a_story() -> None:
    audited = story.parse_audit(AUDIT_DOC, ".state/demo/audit.json")
    text = story.render(facts(audited, story.AlertsSeen({"high_value": 30, "conflict": 9}, 50.2)))
    assert text == (
        "The story of this run\n"
        "=====================\n"
        "Produced   2,000 unique receipts from 20 stores (49 devices, 47 with skewed clocks),\n"
        "           2026-11-20 08:00-09:31 UTC, as 2,061 messages into pos.transactions.\n"
        "           The ground truth is in the ledger .state/demo-ledger.\n"
        "Injected   12 resends (same bytes again), 40 same-second bursts, 60 late receipts\n"
        "           (4 later than the speed layer's 48 h bound), 19 out of order,\n"
        "           10 malformed (broken json 3, wrong type 7),\n"
        "           9 conflicting copies (same key, other items), clock skew up to +-30 s.\n"
        "Speed      1 micro-batch(es) in 41 s: 2,051 valid messages, 10 dead letters;\n"
        "           absorbed 12 resends, counted 9 conflicts, 56 late receipts\n"
        "           updated their windows, 4 beyond its bound left to the batch layer.\n"
        "Alerts     39 alerts in 50 s, each committed once: conflict 9, high_value 30.\n"
        "Batch      Airflow ran pos_batch (demo-20261123T091500) over "
        "[2026-11-20 08:00, 10:00) UTC\n"
        "           (+48 h look-back) in 63 s: read 2,061 master records, kept 2,000 receipts,\n"
        "           removed 21 duplicates (9 of them conflicts), took 4 receipts the speed\n"
        "           layer left; fixed 4 window(s) of the speed view (4 receipts).\n"
        "Serving    store 107 on 2026-11-20: 7 windows, 131 receipts, revenue 2210.40;\n"
        "           7 from batch, 0 from speed, 7 final (horizon 2026-11-20 10:00 UTC).\n"
        "Audit      clean: 2 exact view(s), 0 lost, 0 duplicated, 0 wrong\n"
        "           (.state/demo/audit.json)\n"
        "           batch_aggregates: 310 of 310\n"
        "           dead_letters: 10 of 10 (informational)\n"
        "           speed_receipts: 1,990 of 1,990\n"
        "Verdict    EXACT. 2,000 receipts went through 150 injected faults and every exact view\n"
        "           holds each of them exactly once.\n"
        "Took       4.2 min; logs in .state/demo\n"
    )  # fmt: skip


def test_discrepancies_are_named_in_the_audit_lines_and_the_verdict() -> None:
    doc = {
        "clean": False,
        "views": {
            "speed_receipts": {
                "exact": True, "expected": 1990, "observed": 1989, "lost": 2,
                "duplicated": 1, "wrong": 0,
            }
        },
    }  # fmt: skip
    text = story.render(facts(story.parse_audit(doc, "a.json")))
    assert "Alerts" not in text
    assert (
        "Audit      DISCREPANCIES: 1 exact view(s), 2 lost, 1 duplicated, 0 wrong (a.json)\n"
        "           speed_receipts: 1,989 of 1,990; lost 2, duplicated 1, wrong 0\n"
        "Verdict    NOT EXACT: the auditor found discrepancies in speed_receipts; see a.json.\n"
    ) in text


@pytest.mark.parametrize("doc", [{}, {"clean": True}, {"clean": "yes", "views": {}}])
def test_a_report_without_clean_and_views_is_refused(doc: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not an audit report"):
        story.parse_audit(doc, "r.json")


def test_long_lines_wrap_at_spaces_only_and_keep_paths_whole() -> None:
    audited = story.parse_audit(AUDIT_DOC, "/tmp/fresh-demo/.state/demo/audit.json")
    f = facts(audited)
    many = {"broken_json": 7, "missing_field": 6, "negative_price": 4, "oversized_list": 4}
    f = story.DemoFacts(**{**f.__dict__, "injected": story.Injected(
        **{**f.injected.__dict__, "malformed": {**many, "wrong_type": 6}})})  # fmt: skip
    text = story.render(f)
    assert (
        "           27 malformed (broken json 7, missing field 6, negative price 4, oversized\n"
        "           list 4, wrong type 6),\n"
    ) in text
    assert (
        "Audit      clean: 2 exact view(s), 0 lost, 0 duplicated, 0 wrong\n"
        "           (/tmp/fresh-demo/.state/demo/audit.json)\n"
    ) in text
    assert max(len(line) for line in text.splitlines()) <= 90


def test_a_skipped_view_is_left_out_of_the_story() -> None:
    doc = {
        **AUDIT_DOC,
        "views": {
            **AUDIT_DOC["views"],
            "receipts_topic": {"exact": True, "expected": 0, "observed": 0, "lost": 0,
                               "duplicated": 0, "wrong": 0, "status": "skipped"},
        },
    }  # fmt: skip
    names = [v.name for v in story.parse_audit(doc, "a.json").views]
    assert "receipts_topic" not in names
    assert names == [v.name for v in story.parse_audit(AUDIT_DOC, "a.json").views]
