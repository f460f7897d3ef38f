"""bench/harness.py: the pure parts every benchmark leans on (its command line, the order
of alternating rounds, medians, a pipeline subprocess's environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import harness

ROOT = Path(__file__).resolve().parents[3]


def test_rounds_alternate_in_the_given_order() -> None:
    assert list(harness.alternate(2, ["this", "vs"])) == [
        (1, "this"), (1, "vs"), (2, "this"), (2, "vs"),
    ]  # fmt: skip


def test_every_other_round_reversed_when_asked() -> None:
    assert list(harness.alternate(3, ("a", "b", "c"), reverse_odd=True)) == [
        (1, "a"), (1, "b"), (1, "c"),
        (2, "c"), (2, "b"), (2, "a"),
        (3, "a"), (3, "b"), (3, "c"),
    ]  # fmt: skip


def test_a_generator_of_contenders_is_taken_once_for_every_round() -> None:
    contenders = (name for name in ("x", "y"))
    assert [c for _, c in harness.alternate(2, contenders)] == ["x", "y", "x", "y"]


def test_medians_per_contender() -> None:
    assert harness.medians({"plain": [3.0, 1.0, 2.0], "speed": [4.0, 10.0]}) == {
        "plain": 2.0,
        "speed": 7.0,
    }


def test_the_command_line_has_the_results_options(tmp_path: Path) -> None:
    parser = harness.parser("doc", "speed_backlog")
    args = parser.parse_args([])
    assert args.json == ROOT / "docs" / "bench" / "speed_backlog.json"
    assert args.no_json is False
    assert parser.parse_args(["--json", str(tmp_path / "x.json")]).json == tmp_path / "x.json"
    with pytest.raises(SystemExit):  # no results file: no --json
        harness.parser("doc").parse_args(["--json", "x"])


def test_a_pipeline_subprocess_runs_with_its_keyspace_data_topic_and_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "speed_layer").mkdir(parents=True)  # a revision from before src/
    env = harness.pipeline_env("ks1", tmp_path / "data", "t1", tree, harness.ONE_BATCH)
    keys = ("POS_CASSANDRA_KEYSPACE", "POS_DATA_DIR", "POS_TOPIC_TRANSACTIONS",
            "POS_SPEED_MAX_OFFSETS_PER_TRIGGER", "PYTHONPATH")  # fmt: skip
    assert {k: env[k] for k in keys} == {
        "POS_CASSANDRA_KEYSPACE": "ks1",
        "POS_DATA_DIR": str(tmp_path / "data"),
        "POS_TOPIC_TRANSACTIONS": "t1",
        "POS_SPEED_MAX_OFFSETS_PER_TRIGGER": "1000000",
        "PYTHONPATH": str(tree),
    }
    # This checkout's jars and service state: another revision's tree has neither.
    assert env["POS_JARS_DIR"] and env["POS_STATE_DIR"]
    mine = harness.pipeline_env("ks2", tmp_path)
    assert (mine["POS_CASSANDRA_KEYSPACE"], mine["PYTHONPATH"]) == ("ks2", str(ROOT / "src"))


def test_the_speed_queries_views_first() -> None:
    assert harness.QUERY_OF_JOB == {"views": "pos-speed-views", "archiver": "pos-speed-archiver"}
    assert harness.QUERIES == ("pos-speed-views", "pos-speed-archiver")
