"""bench/speed_latency.py refuses a warm-up its own cap would cut short (it did, silently:
`make bench` asked for 210 s and got the 180 s cap)."""

from __future__ import annotations

from collections.abc import Callable


def test_a_warm_up_above_the_cap_is_refused_with_what_to_do(refusal: Callable[..., str]) -> None:
    stderr = refusal("speed_latency", "--warmup", "210")
    assert "--warmup 210 exceeds --max-warmup 180: raise --max-warmup too" in stderr
