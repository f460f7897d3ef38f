"""Where a benchmark's CPU goes: the machine's busy and idle core-seconds, and the services'.

    with CpuMeter({"kafka": kafka_pid, "cassandra": cassandra_pid}) as meter:
        t0 = time.time(); run(); t1 = time.time()
        use = meter.between(t0, t1)  # CpuUse: wall, busy, idle, per service

Wall-clock throughput on one small machine hides what a contender costs it: a single
process that waits on Cassandra leaves a core idle, a Spark job keeps both busy, and
Cassandra, on the same cores, does work for either. Core-seconds per 1,000 events say
what each side spends, and `needed_core_ms_per_1k` says what a throughput goal allows:
a ratio no tuning can reach shows as a budget smaller than the part that cannot go
(the services' share, the validator's own CPU).

A background thread samples every `interval` seconds (psutil: the machine's CPU times,
each service's user + system time); `between` takes the samples nearest the two instants,
so a span is measured to about one interval. Linux and macOS (psutil).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field

import psutil


@dataclass(frozen=True)
class Sample:
    at: float  # time.time()
    busy_s: float  # all cores, since boot
    idle_s: float
    services_s: dict[str, float]  # each service's user + system time


@dataclass(frozen=True)
class CpuUse:
    """CPU spent over one span, in core-seconds (a 2-core machine has 2 per second)."""

    wall_s: float
    busy_s: float
    idle_s: float
    services_s: dict[str, float] = field(default_factory=dict)

    @property
    def others_s(self) -> float:
        """Busy time outside the services: the contender (and anything else running)."""
        return self.busy_s - sum(self.services_s.values())

    def per_1k(self, events: int) -> dict[str, float]:
        """Core-milliseconds per 1,000 events: busy, idle, each service, the others."""
        scale = 1_000_000 / events  # core-s per event * 1,000 events * 1,000 ms
        spent = {"busy": self.busy_s, **self.services_s, "others": self.others_s}
        return {name: round(s * scale, 1) for name, s in {**spent, "idle": self.idle_s}.items()}


def span(first: Sample, last: Sample) -> CpuUse:
    """The CPU spent between two samples (a service absent from either counts as 0)."""
    names = first.services_s.keys() & last.services_s.keys()
    return CpuUse(
        wall_s=last.at - first.at,
        busy_s=last.busy_s - first.busy_s,
        idle_s=last.idle_s - first.idle_s,
        services_s={n: last.services_s[n] - first.services_s[n] for n in sorted(names)},
    )


def needed_core_ms_per_1k(cores: int, goal_ratio: float, peer_events_per_s: float) -> float:
    """The most a contender may spend (all cores busy, services included), in core-ms
    per 1,000 events, to reach `goal_ratio` times the peer's events/s on `cores` cores."""
    return cores * 1_000_000 / (goal_ratio * peer_events_per_s)


class CpuMeter:
    """Samples in a background thread while open (a context manager)."""

    def __init__(self, services: dict[str, int], interval: float = 0.2) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in services.items()}
        self._interval = interval
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def _sample(self) -> Sample:
        times = psutil.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        # Linux counts guest time inside user time; steal is time the host kept: neither
        # is work done here.
        not_here = sum(getattr(times, f, 0.0) for f in ("guest", "guest_nice", "steal"))
        busy = sum(times) - idle - not_here
        services = {}
        for name, proc in self._processes.items():
            try:
                own = proc.cpu_times()
            except psutil.NoSuchProcess:  # a service restarted: its share is lost
                continue
            services[name] = own.user + own.system
        return Sample(time.time(), busy, idle, services)

    def _run(self) -> None:
        while True:
            self._samples.append(self._sample())
            if self._stop.wait(self._interval):
                self._samples.append(self._sample())
                return

    def __enter__(self) -> CpuMeter:
        self._samples.append(self._sample())
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> CpuUse:
        """The CPU spent from `start` to `end` (time.time() values while open)."""
        samples = list(self._samples)  # the thread appends; a copy is consistent
        if not samples or end < start:
            raise ValueError(f"no samples for the span {start}..{end}")
        return span(_nearest(samples, start), _nearest(samples, end))


def _nearest(samples: list[Sample], at: float) -> Sample:
    i = bisect_left([s.at for s in samples], at)
    near = samples[max(i - 1, 0) : i + 1]
    return min(near, key=lambda s: abs(s.at - at))
