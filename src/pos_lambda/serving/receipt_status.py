"""Receipt status: "did you get receipt X?", answered from the views the pipeline keeps.

A POS terminal that lost its link asks about each receipt it is not sure of, by natural
key `(operation_id, vendor_fiscal_module, transaction_id)`, and resends only those the
pipeline does not know. The answer is one of:

- `accepted`: a natural-key index holds the receipt, the speed layer's (`receipt_keys`)
  or the batch layer's (`receipt_keys_batch`, the served generation's); with the
  winner's Kafka coordinates and when it was first seen (the winner is the first copy
  Kafka appended, src/pos_lambda/views/winners.py, so its record timestamp is the
  first time the pipeline saw the receipt);
- `resend_absorbed`: accepted, and received again since with the same content (the
  index row records the last such copy);
- `conflict`: accepted, and a copy with other content arrived too: both contents
  (the `conflicts` table keeps them side by side), the winner's counts;
- `dead_letter`: no valid copy, but a record whose value claims this natural key was
  refused, with its reason (found through the SAI indexes of `dead_letters` on the
  natural key's three columns: only this store's and device's rows are read, at most
  `DEAD_LETTER_ROWS` of them, and the answer says so when there were more);
- `unknown`: none of these (the HTTP API answers 404 with this status as its body).

A receipt with a valid copy is never reported as a dead letter, even when an earlier
malformed copy of it was refused: the dead letters come along in every answer.

Both layers' indexes are read, and the answer says which hold the receipt (`known_by`)
and whose row its evidence comes from (`source`: the batch's when it has one, as the
merged views take the batch's answer where it has one; the speed layer's otherwise).
Why both: a receipt the speed views job never read is in the pipeline all the same once
the archiver has put it in the master dataset and the batch has folded it (the views
job was down while the archiver ran, or started over from a new checkpoint past the
topic's retention, or the speed tables were rebuilt); a terminal told `unknown` would
resend it. (A receipt beyond the speed layer's lateness bound that the views job did
read is in its index, `in_speed_view` false: the speed views count it nowhere, its
index row says it arrived.) A batch index row
is written before its run commits (src/pos_lambda/batch_layer/fold.py): it still
means the receipt is held, since its record is in the master dataset and the next
run folds it again. Only the speed layer records resends (`last_resend`).

A receipt neither layer has processed yet (the speed layer's Kafka lag) is `unknown`
until one does, so a terminal that resends it sends a copy the views absorb as a
resend.

`look_up` reads through the `ReceiptViews` port (`pos_lambda.serving.views.Views` is the
Cassandra adapter; unit tests use an in-memory fake) and `classify` decides, pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Literal, Protocol

from pos_lambda.schemas.contract import LineItem

Status = Literal["accepted", "resend_absorbed", "conflict", "dead_letter", "unknown"]
# The layer whose natural-key index holds a receipt.
Layer = Literal["speed", "batch"]
# Dead letters read per receipt: a producer that sends one receipt's key malformed again
# and again must not make one status request read them all.
DEAD_LETTER_ROWS = 100


@dataclass(frozen=True)
class ReceiptKey:
    """A receipt's natural key: store, device (fiscal module), receipt number."""

    operation_id: int
    vendor_fiscal_module: int
    transaction_id: int

    def __str__(self) -> str:
        return (
            f"receipt {self.transaction_id} of device {self.vendor_fiscal_module} "
            f"in store {self.operation_id}"
        )


@dataclass(frozen=True)
class KafkaCopy:
    """Where one copy of a receipt is in Kafka."""

    partition: int
    offset: int
    timestamp: datetime | None


@dataclass(frozen=True)
class IndexedReceipt:
    """A layer's index row of a receipt: its winner, and (the speed layer's only) its
    last resend."""

    happened_at: datetime
    day: date
    winner: KafkaCopy
    late: bool
    # Beyond the speed layer's lateness bound: indexed, but only the batch views count it.
    beyond_bound: bool
    last_resend: KafkaCopy | None


@dataclass(frozen=True)
class Content:
    """One version of a receipt: what it says and where it is in Kafka. The winner's
    content is None while the views do not know it (a conflict with a winner beyond
    the speed layer's bound, until the batch layer rewrites the row)."""

    happened_at: datetime
    line_items: list[LineItem] | None
    item_quantity: int | None
    revenue: Decimal | None
    kafka: KafkaCopy


@dataclass(frozen=True)
class ConflictingCopy:
    """A copy whose content differs from the winner's: both versions, and the fields
    in which they differ."""

    differs: list[str]
    copy: Content
    winner: Content


@dataclass(frozen=True)
class DeadLetter:
    """A refused record whose value claims a natural key (any store or device: the
    index finds them by receipt number; `classify` keeps the asked key's)."""

    operation_id: int | None
    vendor_fiscal_module: int | None
    transaction_id: int | None
    kafka_topic: str
    kafka: KafkaCopy
    reason: str
    detail: str | None


@dataclass(frozen=True)
class ReceiptStatus:
    """The answer: `status`, one sentence saying it (`detail`) and the evidence."""

    operation_id: int
    vendor_fiscal_module: int
    transaction_id: int
    status: Status
    detail: str
    winner: KafkaCopy | None = None
    first_seen_at: datetime | None = None  # the winner's Kafka timestamp
    happened_at: datetime | None = None
    day: date | None = None
    late: bool | None = None
    in_speed_view: bool | None = None  # false: beyond the speed layer's lateness bound
    last_resend: KafkaCopy | None = None
    conflicts: list[ConflictingCopy] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Set when the receipt has more dead letters than one answer reads (DEAD_LETTER_ROWS).
    dead_letters_note: str | None = None
    # The layer whose index row gave winner, happened_at, day, late (None: no layer's).
    source: Layer | None = None
    # Every layer whose index holds the receipt, speed first.
    known_by: list[Layer] = field(default_factory=list)


class ReceiptViews(Protocol):
    """What receipt status reads of the views (the port)."""

    def indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        """The receipt's row in the speed layer's natural-key index, if any."""
        ...

    def batch_indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        """The receipt's row in the batch layer's natural-key index under the generation
        the batch pointer serves, if any (none before the batch's first commit)."""
        ...

    def conflicting_copies(self, key: ReceiptKey, winner_day: date) -> list[ConflictingCopy]:
        """The receipt's conflicting copies (stored by its winner's UTC day)."""
        ...

    def dead_letters_of(self, key: ReceiptKey, limit: int) -> list[DeadLetter]:
        """At most `limit` dead letters whose value claims this natural key (store,
        device and receipt number: no other store's or device's rows are read)."""
        ...


def classify(
    key: ReceiptKey,
    indexed: IndexedReceipt | None,
    conflicts: list[ConflictingCopy],
    dead_letters: list[DeadLetter],
    batch: IndexedReceipt | None = None,
) -> ReceiptStatus:
    """The status of `key` from what the views hold of it (pure): `indexed` is the speed
    layer's index row, `batch` the batch layer's.

    A conflict outranks a resend (both can be true: the conflict is what needs a
    person), a valid copy outranks a dead letter (the receipt is in the views). The
    batch's row is the evidence when there is one (its winner is final); the speed
    layer's row alone knows the last resend.
    """
    own = sorted(
        (
            d
            for d in dead_letters
            if (d.operation_id, d.vendor_fiscal_module, d.transaction_id)
            == (key.operation_id, key.vendor_fiscal_module, key.transaction_id)
        ),
        key=lambda d: (d.kafka_topic, d.kafka.partition, d.kafka.offset),
    )
    ident = (key.operation_id, key.vendor_fiscal_module, key.transaction_id)
    known_by: list[Layer] = []
    if indexed is not None:
        known_by.append("speed")
    if batch is not None:
        known_by.append("batch")
    evidence = batch if batch is not None else indexed
    if evidence is None:
        if own:
            last = own[-1]
            return ReceiptStatus(
                *ident,
                status="dead_letter",
                detail=f"{key} was refused ({last.reason}): resend a corrected copy",
                dead_letters=own,
            )
        return ReceiptStatus(
            *ident,
            status="unknown",
            detail=f"{key} is unknown: no view holds it (resend it)",
        )
    where = f"partition {evidence.winner.partition} offset {evidence.winner.offset}"
    if known_by == ["batch"]:
        where += ", known to the batch layer only"
    last_resend = indexed.last_resend if indexed is not None else None
    status: Status
    if conflicts:
        status = "conflict"
        copies = "a copy" if len(conflicts) == 1 else f"{len(conflicts)} copies"
        detail = (
            f"{key} is accepted ({where}), and {copies} with other content came too, "
            "kept apart: the first copy counts"
        )
    elif last_resend is not None:
        status = "resend_absorbed"
        detail = f"{key} is accepted ({where}) and was received again, same content, absorbed"
    else:
        status = "accepted"
        detail = f"{key} is accepted ({where})"
    return ReceiptStatus(
        *ident,
        status=status,
        detail=detail,
        winner=evidence.winner,
        first_seen_at=evidence.winner.timestamp,
        happened_at=evidence.happened_at,
        day=evidence.day,
        late=evidence.late,
        in_speed_view=not evidence.beyond_bound,
        last_resend=last_resend,
        conflicts=sorted(conflicts, key=lambda c: (c.copy.kafka.partition, c.copy.kafka.offset)),
        dead_letters=own,
        source="batch" if batch is not None else "speed",
        known_by=known_by,
    )


def look_up(key: ReceiptKey, views: ReceiptViews, limit: int = DEAD_LETTER_ROWS) -> ReceiptStatus:
    """Read what the views hold of `key` (the shell's part) and classify it; at most
    `limit` dead letters are read (one more, to know whether there were more)."""
    indexed = views.indexed_receipt(key)
    batch = views.batch_indexed_receipt(key)
    evidence = batch if batch is not None else indexed
    conflicts = views.conflicting_copies(key, evidence.day) if evidence is not None else []
    dead = views.dead_letters_of(key, limit + 1)
    answer = classify(key, indexed, conflicts, dead[:limit], batch)
    if len(dead) <= limit:
        return answer
    note = (
        f"more than {limit} dead letters claim {key}: the first {limit} read are shown "
        "(the dead_letters table has them all)"
    )
    return replace(answer, dead_letters_note=note)
