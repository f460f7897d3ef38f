"""One record per receipt: the step of the deduplicated topic (pure).

For each input record in offset order: a valid receipt whose natural key the partition
has not seen is its **winner** (the winner rule of `pos_lambda.views.winners`, applied
record by record by `pos_lambda.views.copies`: the first copy in Kafka's order), and the
step emits it; a later copy of the key, a resend or a conflict, emits nothing; a record
the contract refuses emits nothing either (it is the speed layer's to dead-letter). So
`pos.receipts` holds every accepted receipt once, with the content the views count.

A record of `pos.receipts`:

- key: the natural key as text, `operation_id:vendor_fiscal_module:transaction_id`
  (`101:1001:42`), so that a compacted or keyed consumer sees one key per receipt;
- value: the winner's message, byte for byte as the terminal sent it (a message of the
  contract, schemas/pos_transaction.v1.schema.json: consumers parse it as they would
  `pos.transactions`);
- headers: `pos.source` (`<partition>:<offset>` of the winner in the input topic) and
  `pos.content_hash` (views/content.py), for tracing and for comparing with the views.

Deterministic: the same input partition gives the same records, byte for byte, which is
what lets the shell rebuild the state by replaying the partition after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pos_lambda.schemas.contract import NaturalKey, Receipt, parse_message
from pos_lambda.transactional.step import Output, Source
from pos_lambda.views.content import content_hash
from pos_lambda.views.copies import Copies

SOURCE_HEADER = "pos.source"
HASH_HEADER = "pos.content_hash"


def record_key(key: NaturalKey) -> bytes:
    """`pos.receipts`' record key of a natural key."""
    return ":".join(map(str, key)).encode()


@dataclass
class DedupState:
    """One input partition: the copies seen per natural key, and what was skipped."""

    copies: Copies = field(default_factory=Copies)
    resends: int = 0
    conflicts: int = 0
    invalid: int = 0


class DedupStep:
    """The step (transactional/step.py) of `pos-receipts run`."""

    def initial(self) -> DedupState:
        return DedupState()

    def apply(self, state: DedupState, value: bytes | None, source: Source) -> list[Output]:
        parsed = parse_message(value) if value is not None else None
        if not isinstance(parsed, Receipt):
            state.invalid += 1
            return []
        digest = content_hash(parsed.happened_at, parsed.line_items)
        verdict, _ = state.copies.observe(parsed.natural_key, digest, source.offset)
        if verdict == "resend":
            state.resends += 1
            return []
        if verdict == "conflict":
            state.conflicts += 1
            return []
        assert value is not None  # parsed from it
        headers = (
            (SOURCE_HEADER, f"{source.partition}:{source.offset}".encode()),
            (HASH_HEADER, digest.encode()),
        )
        return [Output(record_key(parsed.natural_key), value, headers)]
