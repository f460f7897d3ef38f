"""The producer's pacing waits in librdkafka's poll(), which takes whole milliseconds."""

from __future__ import annotations

import time
from typing import Any

from pos_lambda.producer.kafka_sink import MIN_WAIT_S, produce
from pos_lambda.producer.simulation import OutgoingMessage


class RecordingProducer:
    """Stands in for confluent_kafka.Producer in this test of the pacing loop alone:
    delivers at once, blocks in poll() for the time asked, as librdkafka does once the
    timeout is in whole milliseconds, and records the waits asked for."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.pending: list[Any] = []

    def produce(self, topic: str, on_delivery: Any, **_: Any) -> None:
        self.pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        if timeout > 0:
            self.waits.append(timeout)
            time.sleep(int(timeout * 1000) / 1000)  # librdkafka: whole milliseconds
        served, self.pending = self.pending, []
        for callback in served:
            callback(None, None)
        return len(served)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0


def test_pacing_faster_than_a_message_per_millisecond_never_asks_for_a_sub_millisecond_wait() -> (
    None
):
    # 3,000 messages/s: a slot every 0.33 ms. A wait under 1 ms would be poll(0) in
    # librdkafka, a busy loop (it took most of a core at 1,000 messages/s).
    fake = RecordingProducer()
    messages = [OutgoingMessage(None, b"x", 0, "receipt") for _ in range(300)]
    stats = produce(messages, "unused", "t", rate=3000, quiet=True, producer=fake)  # type: ignore[arg-type]
    assert stats.acked == 300
    assert fake.waits, "the pacing never waited"
    assert min(fake.waits) >= MIN_WAIT_S == 0.001
