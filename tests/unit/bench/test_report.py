"""bench/report.py's pure part: results JSON -> markdown, against literal expected text."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from bench import report, results

MACHINE = {
    "cores": 2,
    "memory_gb": 23.5,
    "cpu": "AMD EPYC",
    "os": "Debian GNU/Linux 12 (bookworm) (6.1)",
    "python": "3.11.7",
    "java": None,
    "spark": "3.5.7",
    "kafka": "4.1.1",
    "cassandra": "5.0.6",
    "delta": "3.3.2",
    "confluent_kafka": "2.16.1 (librdkafka 2.16.0)",
}

CLIENTS: dict[str, Any] = {
    "benchmark": "producer_clients",
    "commit": {"sha": "53b5d9e0123456789", "dirty": True, "modified": ["README.md"]},
    "measured_at": "2026-11-23T09:10:00+00:00",
    "command": "producer_clients.py --rounds 3",
    "parameters": {"rounds": 3},
    "notes": "both idempotent",
    "machine": MACHINE,
    "load_avg_1m": 1.5,
    "figures": [
        {
            "name": "confluent-kafka events/s",
            "value": 250000.4,
            "unit": "events/s",
            "peer": "kafka-python events/s",
            "peer_value": 50000,
            "ratio": 5.000008,
            "goal": {"op": ">=", "ratio": 1.0, "source": "", "met": True},
        },
        {"name": "kafka-python events/s", "value": 50000, "unit": "events/s"},
    ],
    "runs": [],
}

SERVING: dict[str, Any] = {
    "benchmark": "serving_latency",
    "commit": {"sha": "abcdef0123", "dirty": False, "modified": []},
    "measured_at": "2026-11-22T18:00:00+00:00",
    "machine": MACHINE,
    "figures": [
        {
            "name": "HTTP p99",
            "value": 19.554,
            "unit": "ms",
            "floor": "driver p99",
            "floor_value": 6.8,
            "ratio": 2.8756,
            "goal": {"op": "<=", "ratio": 2.5, "source": "issue 12", "met": False},
        },
    ],
}


def test_section_is_the_literal_table() -> None:
    assert report.section(CLIENTS) == (
        "## producer_clients\n"
        "\n"
        "`producer_clients.py --rounds 3` at 2026-11-23T09:10:00+00:00, commit `53b5d9e012` "
        "with 1 modified tracked file(s), load 1.5.\n"
        "\n"
        "both idempotent\n"
        "\n"
        "| figure | value | peer / floor | ratio | goal | met |\n"
        "|---|---|---|---|---|---|\n"
        "| confluent-kafka events/s | 250,000 events/s | peer: kafka-python events/s = "
        "50,000 events/s | 5.00 | >= 1.00 | yes |\n"
        "| kafka-python events/s | 50,000 events/s | — | — | — | — |\n"
        "\n"
        "![producer_clients: ratios](producer_clients.png)\n"
    )


def test_floor_row_with_a_missed_goal_and_its_source() -> None:
    assert report.figure_row(SERVING["figures"][0]) == (
        "| HTTP p99 | 19.55 ms | floor: driver p99 = 6.80 ms | 2.88 | <= 2.50 (issue 12) | **no** |"
    )


def test_pipes_in_names_do_not_break_the_table() -> None:
    row = report.figure_row({"name": "a|b", "value": 1, "unit": ""})
    assert row == "| a\\|b | 1.00 | — | — | — | — |"


def test_render_one_machine_summary_in_name_order() -> None:
    text = report.render([SERVING, CLIENTS])
    lines = text.splitlines()
    assert lines[4] == (
        "Machine: 2 cores, 23.5 GB memory, AMD EPYC, Debian GNU/Linux 12 (bookworm) (6.1), "
        "Python 3.11.7, Spark 3.5.7, Kafka 4.1.1, Cassandra 5.0.6, Delta Lake 3.3.2, "
        "confluent-kafka 2.16.1 (librdkafka 2.16.0)."
    )
    assert lines[6:10] == [
        "| benchmark | headline ratio | ratio | goal met | measured |",
        "|---|---|---|---|---|",
        "| producer_clients | confluent-kafka events/s / kafka-python events/s | 5.00 | yes "
        "| 2026-11-23 |",
        "| serving_latency | HTTP p99 / driver p99 | 2.88 | **no** | 2026-11-22 |",
    ]
    assert text.index("## producer_clients") < text.index("## serving_latency")


def test_render_labels_machines_when_they_differ() -> None:
    other = copy.deepcopy(SERVING)
    other["machine"]["cores"] = 8
    text = report.render([CLIENTS, other])
    assert "Machines:\n\n- A: 2 cores," in text
    assert "\n- B: 8 cores," in text
    assert "load 1.5, machine A." in text
    assert "`serving_latency` at" in text  # no command recorded: the benchmark's name
    assert "commit `abcdef0123`, machine B." in text


def test_render_without_results_says_how_to_get_them() -> None:
    assert report.render([]).endswith("No results yet: run `make bench`.\n")


def test_a_benchmark_without_ratios_has_no_chart() -> None:
    doc = {**SERVING, "figures": [{"name": "x", "value": 3, "unit": "s"}]}
    assert report.charted(doc) == []
    assert "![" not in report.section(doc)
    assert report.summary_row(doc) == "| serving_latency | — | — | — | 2026-11-22 |"


def test_main_rejects_a_file_that_is_not_a_results_file(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"benchmark": "x"}))
    assert report.main(["--dir", str(tmp_path)]) == 2
    assert not (tmp_path / "README.md").exists()


def test_main_writes_readme_and_a_chart(tmp_path: Path) -> None:
    (tmp_path / "producer_clients.json").write_text(json.dumps(CLIENTS))
    assert report.main(["--dir", str(tmp_path)]) == 0
    assert (tmp_path / "README.md").read_text() == report.render([CLIENTS])
    assert (tmp_path / "producer_clients.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_written_figures_render_as_their_ratios() -> None:
    figs = [
        results.vs_peer("a", 30.0, "events/s", "b", 10.0, results.Goal(">=", 2.0)),
        results.vs_floor("c", 9.0, "ms", "d", 3.0, results.Goal("<=", 2.0, "spec")),
        results.baseline("b", 10.0, "events/s"),
    ]
    assert [report.figure_row(f.to_json()) for f in figs] == [
        "| a | 30.00 events/s | peer: b = 10.00 events/s | 3.00 | >= 2.00 | yes |",
        "| c | 9.00 ms | floor: d = 3.00 ms | 3.00 | <= 2.00 (spec) | **no** |",
        "| b | 10.00 events/s | — | — | — | — |",
    ]
