"""Outputs the broker refuses: which input records to dead-letter instead of replaying
for ever (pure; the shell is src/pos_lambda/transactional/processor.py).

A transaction with one refused record (larger than the output topic's
`max.message.bytes`, say) cannot commit: the processor aborts it and replays from the
committed offsets. If the refusal lasts (the record can never be written), the replay
would loop through aborts for ever and the partition would stop. So the records whose
outputs were refused are remembered (`RefusedOutputs`: which ones, since when the
partition is blocked); once a record is shown to be refused on its own and its
partition has been blocked for `patience_s` (time for an operator to raise a limit set
too low for a while), or at once when the client itself can never send it (larger than
the producer's `message.max.bytes`), the replay writes a **dead letter** in its place:
one small record in the dead-letter topic (`POS_TOPIC_DEAD_LETTERS`), in the same
transaction as the input offsets, so it too is there exactly once.

A dead letter's key is `<input topic>:<partition>:<offset>`; its value is JSON: the
processor, the input coordinates, the output topic, the reason and the refused outputs'
keys and sizes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import KafkaError

from pos_lambda.transactional.step import Output, Source

# Delivery errors that refuse the record itself: the same bytes fail again on a replay.
RECORD_REFUSED = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD})
Verdict = Literal["send", "send_alone", "dead_letter"]


@dataclass
class RefusedOutputs:
    """Which input records' outputs were refused, per partition, and what to do with each
    on the replay.

    The broker refuses a whole *batch* of records (`max.message.bytes` bounds a batch),
    so a refusal first only makes every record of the batch a **suspect**. On the replay
    a suspect's outputs are sent alone (and flushed): refused again, it is **confirmed**;
    delivered, it is cleared. A confirmed record is dead-lettered once its partition has
    been blocked by refusals for `patience_s` (or at once, when the client can never send
    it); until then it is replayed, in case the limit is raised.
    """

    patience_s: float
    suspects: dict[int, set[int]] = field(default_factory=dict)
    confirmed: dict[tuple[int, int], tuple[str, bool]] = field(default_factory=dict)
    blocked_since: dict[int, float] = field(default_factory=dict)

    def note(
        self, source: Source, reason: str, now: float, alone: bool, for_good: bool = False
    ) -> None:
        """An output of `source` was refused at `now`: sent `alone`, or in a batch."""
        self.blocked_since.setdefault(source.partition, now)
        if alone or for_good:
            self.confirmed[(source.partition, source.offset)] = (reason, for_good)
        else:
            self.suspects.setdefault(source.partition, set()).add(source.offset)

    def verdict(self, source: Source, now: float) -> tuple[Verdict, str]:
        """How to write `source`'s outputs on this pass, and (for a dead letter) why."""
        key = (source.partition, source.offset)
        if key in self.confirmed:
            reason, for_good = self.confirmed[key]
            blocked_s = now - self.blocked_since.get(source.partition, now)
            if for_good:
                return "dead_letter", reason
            if blocked_s >= self.patience_s:
                return "dead_letter", f"{reason} (refused for {blocked_s:.0f} s)"
            return "send_alone", ""
        if source.offset in self.suspects.get(source.partition, ()):
            return "send_alone", ""
        return "send", ""

    def delivered(self, source: Source) -> None:
        """`source`'s outputs, sent alone, went through: it is no longer suspected."""
        self.suspects.get(source.partition, set()).discard(source.offset)
        self.confirmed.pop((source.partition, source.offset), None)

    def committed(self, partition: int, offset: int) -> None:
        """The records of `partition` below `offset` are committed: forget them; with
        nothing left in doubt, the partition is no longer blocked."""
        left = {o for o in self.suspects.get(partition, ()) if o >= offset}
        self.suspects[partition] = left
        for key in [k for k in self.confirmed if k[0] == partition and k[1] < offset]:
            del self.confirmed[key]
        if not left and not any(k[0] == partition for k in self.confirmed):
            self.suspects.pop(partition, None)
            self.blocked_since.pop(partition, None)


def dead_letter(
    processor: str,
    input_topic: str,
    output_topic: str,
    source: Source,
    outputs: Sequence[Output],
    reason: str,
) -> Output:
    """The dead-letter record that replaces `source`'s refused `outputs`."""
    where = f"{input_topic}:{source.partition}:{source.offset}"
    doc = {
        "processor": processor,
        "input": {"topic": input_topic, "partition": source.partition, "offset": source.offset},
        "output_topic": output_topic,
        "reason": reason,
        "outputs": [
            {"key": o.key.decode(errors="replace"), "bytes": len(o.value)} for o in outputs
        ],
    }
    value = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return Output(where.encode(), value, (("pos.reason", reason.encode()),))
