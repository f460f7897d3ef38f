"""A broker restarting while a processor takes its partitions (the real-broker
exactly-once test's hard restart): the metadata request of the assignment (the input's
partition count, transactional/layout.py) times out, then finds the topic without
leaders. Both are retried; the processor goes on, every receipt once. Before, the
KafkaException stopped the processor with exit 1 (tests/integration/test_receipts_eos.py
saw it once)."""

from __future__ import annotations

from pos_lambda.dedup import processor as dedup
from tests.support.memory_kafka import RETRIABLE, TIMED_OUT, Fault, MemoryBroker
from tests.support.processor_harness import run_to_completion
from tests.unit.transactional.test_abort_rewind import ALERTS, IN, RECEIPTS, receipts, settings

RESTARTING = [
    Fault("consumer.list_topics", 1, TIMED_OUT),
    Fault("consumer.list_topics", 2, RETRIABLE),
]


def test_a_restarting_broker_at_assignment_is_waited_for() -> None:
    inputs = receipts()
    broker = MemoryBroker({IN: 1, RECEIPTS: 1, ALERTS: 1})
    for value in inputs:
        broker.append(IN, 0, value)
    broker.arm(RESTARTING)

    run = run_to_completion(
        broker, lambda clients: dedup.processor(settings(), clients=clients), restarts=0
    )

    assert [str(f) for f in broker.faults.fired] == [str(f) for f in RESTARTING]
    assert [m.value() for m in broker.read_committed(RECEIPTS)] == inputs
    assert run.exits == ["exit 0", "final: exit 0"]
