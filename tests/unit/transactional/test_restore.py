"""The state rebuild on assignment is bounded by progress, not by a wall-clock total."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pos_lambda.transactional import restore
from pos_lambda.transactional.step import Output, Source


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Record:
    partition_offset: int

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self.partition_offset

    def value(self) -> bytes:
        return b"r%d" % self.partition_offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


@dataclass
class SlowReader:
    """A reader outside the group that hands out `per_call` records per consume() and
    moves the clock on by `seconds_per_call`: a long partition on a slow link. With
    `stuck_at`, it stops returning anything from that offset on (a leader gone)."""

    clock: Clock
    per_call: int
    seconds_per_call: float
    stuck_at: int | None = None
    at: int = 0  # the reader's position
    closed: bool = False

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return (0, 10**9)

    def assign(self, tps: list[TopicPartition]) -> None:
        self.at = 0

    def consume(self, n: int, timeout: float) -> list[Record]:
        self.clock.now += self.seconds_per_call
        if self.stuck_at is not None and self.at >= self.stuck_at:
            return []
        batch = [Record(o) for o in range(self.at, self.at + min(n, self.per_call))]
        self.at += len(batch)
        return batch

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in tps]

    def close(self) -> None:
        self.closed = True


class OneReader:
    def __init__(self, reader: SlowReader) -> None:
        self.the_reader = reader

    def reader(self) -> SlowReader:
        return self.the_reader

    def group_consumer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rebuild never joins the group")

    def producer(self, **kwargs: Any) -> Any:
        raise AssertionError("a rebuild produces nothing")

    def transactional_producer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rebuild produces nothing")


class CountingStep:
    def initial(self) -> list[int]:
        return []

    def apply(self, state: list[int], value: bytes | None, source: Source) -> list[Output]:
        state.append(source.offset)
        return [Output(b"k", b"never produced")]


def test_a_slow_rebuild_that_advances_goes_on_past_the_stall_limit_and_logs_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 30,000 records at 10 per call, 0.5 s a call: 1,500 s in all, 12.5 times the stall
    # limit; the old fixed 120 s total gave up after 2,400 records.
    clock = Clock()
    reader = SlowReader(clock, per_call=10, seconds_per_call=0.5)
    with caplog.at_level(logging.INFO, logger=restore.log.name):
        state, applied = restore.rebuild(
            OneReader(reader), "t", 0, 30_000, CountingStep(), stall_s=120, clock=clock
        )
    assert applied == 30_000 and state == list(range(30_000))
    assert clock.now == 1_500.0 and reader.closed
    progress = [r.getMessage() for r in caplog.records if "rebuilding, offset" in r.getMessage()]
    # One line per 10 s of rebuilding (the first after 10 s).
    assert len(progress) == 149
    assert progress[0] == "t[0]: rebuilding, offset 200 of 30000 (200 records applied, 10 s)"


def test_a_rebuild_that_stops_advancing_fails_with_where_it_stopped() -> None:
    clock = Clock()
    reader = SlowReader(clock, per_call=100, seconds_per_call=1.0, stuck_at=700)
    with pytest.raises(KafkaException) as caught:
        restore.rebuild(OneReader(reader), "t", 3, 5_000, CountingStep(), stall_s=30, clock=clock)
    err: KafkaError = caught.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT
    assert err.str().startswith("rebuilding t[3]: no progress for 30 s at offset 700 of 5000")
    assert "RESTORE_STALL_S" in err.str()
    # It gave up 30 s after the last record, not after a total: 7 calls with records.
    assert clock.now == pytest.approx(7 + 31) and reader.closed


def test_nothing_committed_needs_no_reader() -> None:
    state, applied = restore.rebuild(OneReader(None), "t", 0, -1, CountingStep())  # type: ignore[arg-type]
    assert (state, applied) == ([], 0)
