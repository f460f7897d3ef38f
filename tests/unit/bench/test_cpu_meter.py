"""bench/cpu_meter.py: the arithmetic on literal samples, and the sampler on a real process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.cpu_meter import CpuMeter, CpuUse, Sample, needed_core_ms_per_1k, span


def test_span_subtracts_the_first_sample_from_the_last() -> None:
    first = Sample(100.0, busy_s=50.0, idle_s=10.0, services_s={"cassandra": 7.0, "kafka": 1.0})
    last = Sample(112.5, busy_s=70.0, idle_s=15.0, services_s={"cassandra": 13.0, "kafka": 1.5})
    use = span(first, last)
    assert use == CpuUse(12.5, 20.0, 5.0, {"cassandra": 6.0, "kafka": 0.5})
    assert use.others_s == 13.5


def test_a_service_missing_from_one_sample_is_left_out() -> None:
    first = Sample(0.0, 1.0, 1.0, {"cassandra": 1.0})
    last = Sample(1.0, 2.0, 2.0, {"cassandra": 1.5, "kafka": 9.0})
    assert span(first, last).services_s == {"cassandra": 0.5}


def test_per_1k_events_in_core_milliseconds() -> None:
    use = CpuUse(wall_s=12.0, busy_s=26.0, idle_s=2.0, services_s={"cassandra": 6.0})
    assert use.per_1k(50_000) == {"busy": 520.0, "cassandra": 120.0, "others": 400.0, "idle": 40.0}


def test_the_budget_a_throughput_goal_leaves() -> None:
    # 2 cores, twice a peer's 4,000 events/s: 8,000 events/s, 250 core-us per event.
    assert needed_core_ms_per_1k(2, 2.0, 4_000) == 250.0
    assert needed_core_ms_per_1k(8, 1.5, 4_000) == pytest.approx(1333.33, abs=0.01)


_BURNER = """
import sys, time
sys.stdin.readline()  # go
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
print(time.process_time(), flush=True)
sys.stdin.readline()  # stay alive until told, so its CPU time can still be read
"""


def test_the_meter_attributes_a_process_cpu_to_it() -> None:
    burner = subprocess.Popen(
        [sys.executable, "-c", _BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert burner.stdin is not None and burner.stdout is not None
    try:
        with CpuMeter({"burner": burner.pid}, interval=0.05) as meter:
            start = time.time()
            burner.stdin.write("go\n")
            burner.stdin.flush()
            own_cpu = float(burner.stdout.readline())  # its process time after the burn
        end = time.time()  # after the meter's last sample, taken as it closed
        use = meter.between(start, end)
    finally:
        burner.communicate("done\n", timeout=30)
    # The burn (0.5 s of CPU) and at most the rest of its start-up, in 10 ms clock ticks.
    assert 0.48 <= use.services_s["burner"] <= own_cpu + 0.02
    assert use.busy_s >= use.services_s["burner"] - 0.05  # the machine was at least that busy
    assert use.wall_s == pytest.approx(end - start, abs=0.15)


def test_between_needs_a_span_in_order() -> None:
    with CpuMeter({}, interval=0.05) as meter:
        now = time.time()
    with pytest.raises(ValueError, match="no samples"):
        meter.between(now, now - 1)
