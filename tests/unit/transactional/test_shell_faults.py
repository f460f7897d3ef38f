"""The smallest reproductions of what the exactly-once properties found
(test_exactly_once_properties.py), one fault each, on the dedup processor: n distinct
valid receipts in one partition must come out once each, byte for byte, with the offset
committed at n, and every instance must stop with an exit code or an injected crash.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from pos_lambda.dedup import processor as dedup
from pos_lambda.producer.simulation import encode
from pos_lambda.schemas.contract import LineItem, Receipt
from pos_lambda.settings import load_settings
from tests.support import memory_kafka as mk
from tests.support.memory_kafka import Fault, MemoryBroker
from tests.support.processor_harness import Run, run_to_completion

IN, OUT = "pos.transactions", "pos.receipts"


def receipts(n: int) -> list[bytes]:
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    return [
        encode(Receipt(start + timedelta(minutes=i), 101, i + 1, 1001,
                       (LineItem("bread", Decimal("2.50"), 1),)))
        for i in range(n)
    ]  # fmt: skip


def run(n: int, faults: list[Fault], max_messages: int) -> tuple[MemoryBroker, list[bytes], Run]:
    broker = MemoryBroker({IN: 1, OUT: 1})
    inputs = receipts(n)
    for value in inputs:
        broker.append(IN, 0, value)
    broker.arm(faults)
    s = load_settings(
        receipts_transaction_max_messages=max_messages, receipts_transaction_max_ms=50
    )
    outcome = run_to_completion(broker, lambda clients: dedup.processor(s, clients=clients))
    assert [str(f) for f in broker.faults.fired] == [str(f) for f in faults], "did not strike"
    return broker, inputs, outcome


def assert_exactly_once(broker: MemoryBroker, inputs: list[bytes], outcome: Run) -> None:
    out = [m.value() for m in broker.read_committed(OUT)]
    assert out == inputs, f"{len(out)} of {len(inputs)} receipts out; instances: {outcome.exits}"
    assert broker.committed_offsets("pos-receipts", IN) == {0: len(inputs)}


def test_a_record_polled_just_before_a_revocation_is_not_committed_unprocessed() -> None:
    """max 3 per transaction: [r0 r1 r2] commit; r3 opens a transaction; poll() returns
    r4 and the consume() after it serves a revocation: on_revoke commits the open
    transaction with consumer.position(), which already counts r4, then r4 is dropped as
    fetched before the rebalance. Its offset is committed, its receipt never produced."""
    broker, inputs, outcome = run(5, [Fault("consumer.consume", 2, mk.REVOKE)], max_messages=3)
    assert_exactly_once(broker, inputs, outcome)


CRASH_IN_SECOND_COMMIT = Fault("producer.commit_transaction", 2, mk.CRASH)  # then a rebuild


@pytest.mark.parametrize(
    "faults",
    [
        # on_assign's committed() times out (the coordinator moving; or, KIP-447, another
        # member's transaction holding the partition's offsets past the call's 60 s): the
        # callback's error is re-raised by _raise_pending as a plain KafkaException.
        [Fault("consumer.committed", 1, mk.TIMED_OUT)],
        # The same from _abort_and_rewind's committed(), after an abortable commit.
        [Fault("producer.commit_transaction", 1, mk.ABORTABLE),
         Fault("consumer.committed", 2, mk.TIMED_OUT)],
        # The rebuild's reader meets a transport error (restore._done raises it) ...
        [CRASH_IN_SECOND_COMMIT, Fault("reader.consume", 1, mk.RETRIABLE)],
        # ... or its watermark query times out.
        [CRASH_IN_SECOND_COMMIT, Fault("reader.get_watermark_offsets", 1, mk.TIMED_OUT)],
    ],
    ids=lambda faults: str(faults[-1]),
)  # fmt: skip
def test_a_retriable_error_does_not_end_the_process(faults: list[Fault]) -> None:
    broker, inputs, outcome = run(4, faults, max_messages=2)
    assert_exactly_once(broker, inputs, outcome)  # a supervisor's restart saves the output
    died = [e for e in outcome.exits if "died:" in e]
    assert not died, f"{died[0]} (instances: {outcome.exits})"
