"""The cluster chaos run's pure parts: where Kafka places a coordinator, which node
leads the KRaft quorum, and the figures (gaps, rates) from sampled offsets."""

from __future__ import annotations

from pos_lambda_dev.demo import cluster_chaos, cluster_faults
from pos_lambda_dev.demo.cluster_chaos import Sample


def test_java_string_hash_matches_javas() -> None:
    # Values of java.lang.String#hashCode, as the JVM computes them.
    assert cluster_faults.java_string_hash("") == 0
    assert cluster_faults.java_string_hash("hello") == 99162322
    assert cluster_faults.java_string_hash("Aa") == cluster_faults.java_string_hash("BB") == 2112
    assert cluster_faults.java_string_hash("polygenelubricants") == -(2**31)


def test_coordinator_partition_is_kafkas_abs_hash_modulo() -> None:
    assert cluster_faults.coordinator_partition("hello", 4) == 99162322 % 4
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0, not to itself.
    assert cluster_faults.coordinator_partition("polygenelubricants", 4) == 0
    # A negative hash: "pos-alerts" hashes below zero in Java.
    h = cluster_faults.java_string_hash("pos-alerts-chaosc-1")
    assert cluster_faults.coordinator_partition("pos-alerts-chaosc-1", 4) == abs(h) % 4


def test_the_quorum_leader_is_the_leader_of_the_newest_epoch() -> None:
    states = [
        {"leaderId": 1, "leaderEpoch": 3},
        {"leaderId": 2, "leaderEpoch": 5},
        {"leaderId": -1, "leaderEpoch": 6},  # a node mid-election knows no leader
    ]
    assert cluster_faults.quorum_leader(states) == 2
    assert cluster_faults.quorum_leader([{"leaderEpoch": 1}]) is None
    assert cluster_faults.quorum_leader([]) is None


def _samples(views: list[int | None]) -> list[Sample]:
    return [Sample(float(t), v, None, 0) for t, v in enumerate(views)]


def test_the_longest_gap_is_between_two_commits_around_the_fault() -> None:
    # Commits at t=1, 2, 8, 9: the gap 2 -> 8 overlaps a fault over [3, 5].
    samples = _samples([0, 5, 10, 10, 10, 10, 10, 10, 20, 30])
    assert cluster_chaos.longest_gap(samples, "views", 3, 5) == 6.0
    # A fault over [8.5, 9] sees only the one-second gap.
    assert cluster_chaos.longest_gap(samples, "views", 8.5, 9) == 1.0
    # Unknown values (a broker away) neither commit nor end a gap.
    gappy = _samples([0, None, None, 0, 4])
    assert cluster_chaos.longest_gap(gappy, "views", 1, 2) == 4.0
    # A stall still open at the last sample counts up to it.
    assert cluster_chaos.longest_gap(_samples([0, 3, 3, 3]), "views", 2, 3) == 2.0
    # Before its first known value the series had not committed yet (start-up): the
    # gap around a fault over [3.5, 4] is 3 -> 5, not 0 -> 5.
    starting = _samples([None, None, None, 5, 5, 9])
    assert cluster_chaos.longest_gap(starting, "views", 3.5, 4) == 2.0
    # Never known: the whole run is one open gap, as before.
    assert cluster_chaos.longest_gap(_samples([None, None, None]), "views", 1, 2) == 2.0


def test_rates_are_offsets_per_second_from_the_last_known_values() -> None:
    samples = _samples([0, 10, None, 30, 40])
    assert cluster_chaos.rate(samples, "views", 0, 4) == 10.0
    assert cluster_chaos.rate(samples, "views", 1, 2) == 0.0  # t=2 unknown: still 10
    assert cluster_chaos.rate(samples, "receipts", 0, 4) is None
    assert cluster_chaos.rate(samples, "views", 3, 3) is None


def test_the_figures_page_has_a_row_per_fault() -> None:
    fault = cluster_faults.FAULTS[0]
    struck = cluster_faults.Struck("kafka-2", "leader of 3 of 4", 10.0, 40.0)
    samples = [Sample(float(t), t * 10, t * 10, t * 10) for t in range(50)]
    figures = cluster_chaos.figures_of(fault, struck, samples, settle_s=10)
    assert figures.gaps_s == {"views": 1.0, "receipts": 1.0, "alerts": 1.0}
    assert figures.rate_before["views"] == 10.0 and figures.rate_during["views"] == 10.0
    doc = {
        "when": "2026-11-29 07:00 UTC", "commit": "abc1234", "seconds": 900.0,
        "messages": 30500, "receipts": 30000, "rate": 40.0, "seed": 64, "down_s": 30.0,
        "memory_mib": {"kafka": 1000, "cassandra": 2800, "total": 3800},
        "audit": "clean: 5 exact views, 0 lost, 0 duplicated, 0 wrong",
        "faults": [figures.__dict__], "notes": [],
    }  # fmt: skip
    page = cluster_chaos.render(doc)
    assert f"| {fault.label} | kafka-2 | 30 | 1 | 1 | 1 | 10.0 / 10.0 (1.00)" in page
    assert "**clean: 5 exact views, 0 lost, 0 duplicated, 0 wrong**" in page


def test_hint_holders_are_the_nodes_with_hint_files_for_another() -> None:
    """Rows of `system_views.pending_hints`, as each live node answered for itself."""
    from types import SimpleNamespace as Row

    node2 = "6e5fba1a-13e3-4bb4-a1cd-8b2de1e5b2e4"
    rows = {
        1: [Row(host_id=node2, files=1)],
        3: [Row(host_id=node2, files=2)],
        4: [Row(host_id=node2, files=0)],  # replayed, its row not yet gone
        5: [],
    }
    assert cluster_faults.hint_holders(rows) == 2
    assert cluster_faults.hint_holders({1: [], 3: []}) == 0
