"""The chaos plan and figures table, from literal facts to literal text."""

from __future__ import annotations

import argparse
import itertools

import pytest

from pos_lambda_dev.demo import figures
from pos_lambda_dev.demo.story import Audited, ViewAudit


def test_the_plan_is_seeded_spread_out_and_inside_the_stream() -> None:
    a = figures.plan(13)
    assert a == figures.plan(13)
    assert a != figures.plan(14)
    assert sorted(f.kind for f in a.faults) == sorted(figures.STREAM_FAULTS)
    ats = [f.at for f in a.faults]
    assert ats == sorted(ats)
    assert all(0.05 < x < 0.85 for x in ats)
    # one fault per slot of (0.85 - 0.05) / 14: at least 0.2 slot widths apart
    assert len(ats) == 14
    assert all(b - a_ > 0.2 * 0.8 / 14 for a_, b in itertools.pairwise(ats))
    kinds = [f.kind for f in a.faults]
    assert kinds.count("speed_kill") == 3 and kinds.count("alerts_kill") == 2
    assert kinds.count("receipts_kill") == 1


def test_every_fault_kind_has_a_label_and_a_fault_that_makes_it() -> None:
    from pos_lambda_dev.demo import faults

    for kind in set(figures.STREAM_FAULTS):
        assert kind in figures.LABELS
        assert faults.named(kind).name == kind


def test_a_plan_can_put_every_fault_at_the_streams_start() -> None:
    early = figures.plan(4242, window=(0.0, 0.15))
    assert sorted(f.kind for f in early.faults) == sorted(figures.STREAM_FAULTS)
    assert all(0.0 < f.at < 0.15 for f in early.faults)


@pytest.mark.parametrize("window", [(0.5, 0.5), (0.2, 0.1), (-0.1, 0.5), (0.5, 1.2)])
def test_a_plan_refuses_a_window_outside_the_stream(window: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="fault window"):
        figures.plan(1, window=window)


def _facts(clean: bool, count: int = 100_000) -> figures.ChaosFacts:
    views = [
        ViewAudit("raw_receipts", True, 100_000, 100_000, 0 if clean else 3, 0, 0),
        ViewAudit("dead_letters", False, 498, 498, 0, 0, 0),
    ]
    return figures.ChaosFacts(
        count=count, seed=13, full=count >= 100_000, messages=101_710, resends=1_012,
        conflicts_injected=200, malformed=498, late=2_000, beyond_bound=130,
        outcomes=[
            figures.Outcome("speed_kill", 12_000, 31.4, "driver pid 7 killed in a micro-batch"),
            figures.Outcome("alerts_kill", 15_500, None, "crash point in its transaction 9"),
            figures.Outcome("kafka_restart", 40_100, 14.6, "broker back in 12 s"),
        ],
        planned=8, restarts=4, duplicates_removed=1_212, conflicts_found=200,
        conflict_rows=200, conflict_alerts=200, dead_letters=498,
        batch_via="Airflow DAG pos_batch, run chaos-1 (80 s)",
        audit=Audited(clean, views, ".state/chaos/logs/audit.json"),
        seconds=1_500.0, when="2026-11-23 10:30 UTC", commit="abc1234",
    )  # fmt: skip


def test_a_clean_full_run_renders_as_this_table() -> None:
    assert figures.render(_facts(True)) == (
        "## Chaos run: 100,000 receipts\n"
        "\n"
        "Seed 13, 2026-11-23 10:30 UTC, commit abc1234, 25.0 min.\n"
        "\n"
        "| figure | value |\n"
        "|---|---|\n"
        "| messages produced | 101,710 (100,000 unique receipts) |\n"
        "| faults survived | 3 of 8: kill -9 of the speed-layer driver (mid micro-batch) x1; "
        "Kafka broker hard restart (kill -9, start) x1; kill -9 of the alerts processor "
        "mid-transaction x1 |\n"
        "| processes restarted after a fault | 4 |\n"
        "| duplicates injected / removed | 1,212 (1,012 resends + 200 conflicting copies) / "
        "1,212 (committed batch runs) |\n"
        "| conflicts injected / found | 200 / 200 (committed batch runs), 200 rows in "
        "`conflicts`, "
        "200 conflict alerts |\n"
        "| bad inputs injected / routed | 498 malformed / 498 dead letters |\n"
        "| late receipts (beyond the speed bound) | 2,000 (130, served by the batch layer) |\n"
        "| batch layer run | Airflow DAG pos_batch, run chaos-1 (80 s) |\n"
        "| lost (exact views) | 0 |\n"
        "| duplicated (exact views) | 0 |\n"
        "| wrong (exact views) | 0 |\n"
        "| audit | clean |\n"
        "\n"
        "| view | exact | expected | observed | lost | duplicated | wrong |\n"
        "|---|---|---|---|---|---|---|\n"
        "| raw_receipts | yes | 100,000 | 100,000 | 0 | 0 | 0 |\n"
        "| dead_letters | no | 498 | 498 | 0 | 0 | 0 |\n"
        "\n"
        "| # | fault | at message | recovered in | detail |\n"
        "|---|---|---|---|---|\n"
        "| 1 | kill -9 of the speed-layer driver (mid micro-batch) | 12,000 | 31 s "
        "| driver pid 7 killed in a micro-batch |\n"
        "| 2 | kill -9 of the alerts processor mid-transaction | 15,500 | - "
        "| crash point in its transaction 9 |\n"
        "| 3 | Kafka broker hard restart (kill -9, start) | 40,100 | 15 s "
        "| broker back in 12 s |\n"
    )


def test_a_smaller_run_with_discrepancies_says_so() -> None:
    text = figures.render(_facts(False, count=5_000))
    assert text.startswith("## Chaos run (SMALLER than the issue's 100,000: 5,000 receipts)\n")
    assert "| lost (exact views) | 3 |\n" in text
    assert "| audit | DISCREPANCIES (.state/chaos/logs/audit.json) |\n" in text
    doc = figures.as_json(_facts(False, count=5_000))
    assert doc["totals"] == {"lost": 3, "duplicated": 0, "wrong": 0}
    assert doc["full"] is False


def test_the_receipts_kill_is_in_the_table_with_its_recovery_time() -> None:
    facts = _facts(True)
    kill = figures.Outcome("receipts_kill", 50_000, 18.6, "pid 9 killed; its successor committed")
    text = figures.render(
        figures.ChaosFacts(**{**facts.__dict__, "outcomes": [*facts.outcomes, kill]})
    )
    assert "; kill -9 of the receipts processor (the deduplicated topic) x1 |\n" in text
    assert (
        "| 4 | kill -9 of the receipts processor (the deduplicated topic) | 50,000 | 19 s "
        "| pid 9 killed; its successor committed |\n"
    ) in text


def test_a_receipt_the_broker_lost_after_acknowledging_it_fails_the_verdict() -> None:
    """No excuse left for "the broker's" losses (issue 74): the producer checks its
    acknowledgements and resends, so any receipt lost fails the run."""
    from tests.e2e.test_chaos import assert_survived

    args = argparse.Namespace(seed=13, fault_window=(0.1, 0.9))
    plan = figures.plan(args.seed, window=args.fault_window)
    made = [figures.Outcome(f.kind, 1_000, 10.0, "made") for f in plan.faults]
    lost = [[119, 1046, 2542, "2026-11-19T10:30:00Z"]]
    facts = _facts(False)
    facts = figures.ChaosFacts(**{**facts.__dict__, "outcomes": made, "broker_lost": lost})
    with pytest.raises(AssertionError, match=r"\(3, 0, 0\) == \(0, 0, 0\)"):
        assert_survived(args, facts)
