"""bench/results.py: figures as ratios, goals, the document, reading it back."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench import results


def test_peer_ratio_and_goal_met_either_way() -> None:
    faster = results.vs_peer("a", 50.0, "events/s", "b", 20.0, results.Goal(">=", 2.0, "why"))
    assert faster.to_json() == {
        "name": "a",
        "value": 50.0,
        "unit": "events/s",
        "peer": "b",
        "peer_value": 20.0,
        "ratio": 2.5,
        "goal": {"op": ">=", "ratio": 2.0, "source": "why", "met": True},
    }
    slower = results.vs_floor("c", 9.0, "ms", "d", 2.0, results.Goal("<=", 3.0))
    assert slower.to_json()["ratio"] == 4.5
    assert slower.to_json()["goal"]["met"] is False
    assert results.Goal("<=", 3.0).met(3.0) and results.Goal(">=", 3.0).met(3.0)


def test_baseline_has_no_ratio() -> None:
    assert results.baseline("b", 20.0, "events/s").to_json() == {
        "name": "b",
        "value": 20.0,
        "unit": "events/s",
    }


def test_zero_reference_is_an_error_not_infinity() -> None:
    with pytest.raises(ValueError, match="its peer 'b' is 0"):
        results.vs_peer("a", 1.0, "x", "b", 0.0).to_json()


def test_write_then_load_round_trip(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    results.add_json_argument(parser, "demo")
    args = parser.parse_args(["--json", str(tmp_path / "demo.json")])
    path = results.write(args, "demo", [results.baseline("x", 1.0, "s")], runs=[{"round": 1}])
    assert path == tmp_path / "demo.json"
    doc = results.load(path)
    assert doc["benchmark"] == "demo"
    assert doc["figures"] == [{"name": "x", "value": 1.0, "unit": "s"}]
    assert doc["runs"] == [{"round": 1}]
    assert "json" not in doc["parameters"]
    assert doc["machine"]["cores"] >= 1


def test_no_json_writes_nothing(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    results.add_json_argument(parser, "demo")
    args = parser.parse_args(["--json", str(tmp_path / "demo.json"), "--no-json"])
    assert results.write(args, "demo", [], runs=[]) is None
    assert list(tmp_path.iterdir()) == []


def test_default_path_is_docs_bench() -> None:
    parser = argparse.ArgumentParser()
    results.add_json_argument(parser, "demo")
    assert parser.parse_args([]).json == results.PROJECT_ROOT / "docs" / "bench" / "demo.json"


def test_load_says_what_is_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"benchmark": "x", "figures": []}))
    with pytest.raises(ValueError, match="missing commit, measured_at, machine"):
        results.load(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON results file"):
        results.load(bad)


def test_pom_versions_from_properties_and_dependencies(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0">'
        "<properties><kafka.version>4.1.1</kafka.version></properties>"
        "<dependencies><dependency><artifactId>cassandra-all</artifactId>"
        "<version>5.0.6</version></dependency></dependencies></project>"
    )
    assert results._pom_version(pom, "kafka.version") == "4.1.1"
    assert results._pom_version(pom, "cassandra-all") == "5.0.6"
    assert results._pom_version(pom, "spark.version") is None
    assert results._pom_version(tmp_path / "missing.xml", "x") is None


def test_modified_paths_keep_their_first_letter() -> None:
    # A leading space is part of the status ("XY"), not padding to strip.
    assert results.modified_paths(" M src/pos_lambda/audit/run.py\nM  README.md\n") == [
        "src/pos_lambda/audit/run.py",
        "README.md",
    ]
    assert results.modified_paths("") == []
