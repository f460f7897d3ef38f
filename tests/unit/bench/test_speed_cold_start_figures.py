"""bench/speed_cold_start.py: the one-shot part's figures from literal runs."""

from __future__ import annotations

import os

import pytest

from bench.speed_cold_start import figures


def _run(rate: float, busy: float, cassandra: float | None = None) -> dict[str, object]:
    cpu = {"busy": busy, "idle": 10.0, "others": busy - (cassandra or 0.0)}
    if cassandra is not None:
        cpu["cassandra"] = cassandra
    return {"events_per_second": rate, "messages": 50_000, "process_s": 25.0,
            "cpu_core_ms_per_1k": cpu}  # fmt: skip


def test_the_one_shot_ratio_and_its_cpu_budget() -> None:
    shot = {
        "messages": 50_529,
        "runs": {
            "plain": [_run(4_000.0, 300.0, 60.0), _run(5_000.0, 320.0, 70.0)],
            "views": [_run(4_500.0, 400.0, 120.0), _run(4_300.0, 420.0, 110.0)],
        },
    }
    figs = {f.name: f for f in figures({"one_shot": shot}, trigger_s=1.0)}
    speed = figs["one-shot views, 50,529 messages, from its micro-batch's start (cold JVM)"]
    assert (speed.value, speed.reference_value) == (4_400.0, 4_500.0)
    assert speed.goal is not None and not speed.goal.met(speed.ratio)
    whole = figs["one-shot views, 50,529 messages, from the process's start (JVM start too)"]
    assert whole.value == 2_000.0  # 50,000 messages in 25 s
    cpu = figs["one-shot views, 50,529 messages (cold JVM): CPU"]
    # Twice the plain consumer's 4,500 events/s on this machine's cores, all of them busy.
    assert cpu.value == 410.0
    assert cpu.reference_value == pytest.approx((os.cpu_count() or 1) * 1e6 / 9_000)
    assert figs["one-shot views, 50,529 messages (cold JVM): CPU, Cassandra's share"].value == 115.0
    assert figs["plain consumer: CPU, busy"].value == 310.0


def test_runs_without_cpu_samples_give_the_throughput_figures_only() -> None:
    bare = {"events_per_second": 100.0, "messages": 10, "process_s": 1.0}
    shot = {"messages": 10, "runs": {"plain": [bare], "views": [bare]}}
    names = [f.name for f in figures({"one_shot": shot}, trigger_s=1.0)]
    assert not [n for n in names if "CPU" in n]
    assert len(names) == 2
