"""The winner rule of `pos_lambda.views.winners`, applied record by record (pure Python).

The speed and batch layers rank a whole set of copies in Spark; the transactional
processors (the alerts, the deduplicated topic) see one record at a time, in offset
order, and must decide the same. Within one partition that is simple: the winner is the
copy with the lowest offset, that is the first one seen. Every later copy is a *resend*
when its content hash (`pos_lambda.views.content`) was seen before for its natural key,
and a *conflict* when its content is new. (The views call a copy equal to the winner a
resend; here a copy equal to an earlier *conflicting* copy is one too, so that each
distinct conflicting content is reported once.)

All copies of a receipt share a partition (the producer keys by device), so the copies
one partition has seen are all there are; a producer that does not key by device would
break this, as it breaks the speed layer's equality with the batch layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pos_lambda.schemas.contract import NaturalKey

Verdict = Literal["winner", "resend", "conflict"]


@dataclass
class KeyCopies:
    """What a partition saw of one natural key: its winner and every content."""

    first_hash: str
    first_offset: int
    hashes: set[str]


@dataclass
class Copies:
    """The copies of each natural key one partition has seen so far."""

    seen: dict[NaturalKey, KeyCopies] = field(default_factory=dict)

    def observe(self, key: NaturalKey, digest: str, offset: int) -> tuple[Verdict, KeyCopies]:
        """Record one copy (in offset order): what it is, and the key's copies (its winner's
        hash and offset; for a winner, itself)."""
        before = self.seen.get(key)
        if before is None:
            first = KeyCopies(digest, offset, {digest})
            self.seen[key] = first
            return "winner", first
        if digest in before.hashes:
            return "resend", before
        before.hashes.add(digest)
        return "conflict", before
