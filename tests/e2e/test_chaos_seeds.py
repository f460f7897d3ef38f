"""Short chaos runs under several seeds: the run must pass for any seed, including one
whose faults all strike in the first 15% of the stream, before the master dataset or a
committed batch exists (a fault then waits for its precondition, within a bound).

Each run is the real thing at a small size (3,000 receipts, the batch without Airflow),
written to a temporary directory so docs/chaos.md keeps the full run's figures:

    make chaos-seeds          # the seeds below, one after the other (~12-15 min each)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pos_lambda_dev.demo import chaos, figures
from tests.e2e.test_chaos import assert_survived

pytestmark = pytest.mark.e2e

EARLY = (0.0, 0.15)
SEEDS = [
    (4242, figures.DEFAULT_WINDOW),  # the seed whose early batch kill once failed the run
    (15, EARLY),  # every fault in the first 15% of the stream
    (2026, EARLY),
]


@pytest.mark.timeout(0)  # the run bounds itself, and its cleanup must run (test_chaos.py)
@pytest.mark.parametrize(
    ("seed", "window"), SEEDS, ids=[f"seed{s}-window{w[0]:g}-{w[1]:g}" for s, w in SEEDS]
)
def test_a_short_chaos_run_survives_this_seed(
    seed: int, window: tuple[float, float], tmp_path: Path
) -> None:
    args = chaos.build_parser().parse_args([
        "--count", "3000", "--seed", str(seed), "--fault-window", f"{window[0]},{window[1]}",
        "--batch", "direct", "--out", str(tmp_path), "--timeout", "1800",
    ])  # fmt: skip
    facts = chaos.run(args)
    assert_survived(args, facts)
