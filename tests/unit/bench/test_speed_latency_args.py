"""bench/speed_latency.py refuses a warm-up its own cap would cut short (it did, silently:
`make bench` asked for 210 s and got the 180 s cap)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"


def test_a_warm_up_above_the_cap_is_refused_with_what_to_do() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "speed_latency.py"), "--warmup", "210"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--warmup 210 exceeds --max-warmup 180: raise --max-warmup too" in done.stderr
