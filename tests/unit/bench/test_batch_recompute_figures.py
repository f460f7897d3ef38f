"""bench/batch_recompute.py's figures from its runs: with `--baseline`, the medians of
each code's rounds and this checkout's job time over the baseline's, per size."""

from __future__ import annotations

from collections.abc import Callable

from bench import batch_recompute
from bench.results import Figure

OTHER = "code at f6ec5ac"


def run(code: str, n: int, job_s: float, floor_s: float, rnd: int) -> dict[str, object]:
    return {"part": "batch", "records": n, "job_s": job_s, "floor_s": floor_s,
            "code": code, "round": rnd}  # fmt: skip


def by_name(figures: list[Figure]) -> dict[str, Figure]:
    return {f.name: f for f in figures}


def test_a_baseline_run_gives_medians_and_this_over_the_baseline_per_size() -> None:
    runs = [
        run("this", 1_000, 10.0, 1.0, 1), run(OTHER, 1_000, 8.0, 0.5, 1),
        run(OTHER, 1_000, 6.0, 0.5, 2), run("this", 1_000, 14.0, 3.0, 2),
        run("this", 1_000, 11.0, 2.0, 3),
        run("this", 2_000, 30.0, 2.0, 1), run(OTHER, 2_000, 20.0, 1.0, 1),
    ]  # fmt: skip
    figures = by_name(batch_recompute.figures(runs, OTHER))

    median_1k = figures["batch job, 1,000 records"]
    assert (median_1k.value, median_1k.ratio) == (11.0, 5.5)  # medians, not means: 11 s, 2 s
    vs_1k = figures["batch job, 1,000 records, this checkout"]
    assert (vs_1k.value, vs_1k.ratio) == (11.0, 11.0 / 7.0)
    assert vs_1k.reference == f"batch job, 1,000 records, {OTHER}"
    assert figures["batch job, 2,000 records, this checkout"].ratio == 1.5
    # The scaling figure compares this checkout's sizes only.
    assert figures["batch job, 2,000 records (scaling)"].ratio == 30.0 / 11.0


def test_without_a_baseline_a_run_stands_for_itself() -> None:
    figures = by_name(batch_recompute.figures([
        {"part": "batch", "records": 1_000, "job_s": 9.0, "floor_s": 3.0},
    ]))  # fmt: skip
    assert figures["batch job, 1,000 records"].ratio == 3.0
    assert not any(name.endswith("this checkout") for name in figures)


def test_rounds_below_one_are_refused_with_what_to_do(refusal: Callable[..., str]) -> None:
    assert "--rounds must be at least 1" in refusal("batch_recompute", "--rounds", "0")
