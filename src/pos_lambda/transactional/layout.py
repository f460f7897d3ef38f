"""Which partition of the input topic is a record's home, and under which partition
layout each input offset was processed (pure).

A transactional processor keeps its step's state per input partition: all copies of a
receipt share a partition because producers key by device. That holds for one partition
count only. Growing `pos.transactions` from N to M partitions moves most devices'
keys to another partition, whose state never saw their receipts, and producers switch at
different moments (each when its metadata refreshes), so for a while one device's
records land on both its old and its new partition. Per-partition state would then emit a
resend a second time (issue 73: 557 of 1,000 receipts doubled in `pos.receipts`).

The rule that keeps each key in one ordered log across any change of the partition count:

- **A record's home** under a layout of `count` partitions is the partition the default
  partitioner of librdkafka (`consistent_random`: CRC-32 of the key modulo the count) and
  of `pos-producer` picks for its key. A record without a key has no home: it stays
  where it is.
- **A record on its home partition is processed there.** A record elsewhere (a *stray*:
  sent by a producer whose metadata still had the old count, or by a producer with
  another partitioner) is forwarded, byte for byte, to its home partition of the input
  topic, in the transaction that commits its offset, and processed there. The forward
  carries the header `pos.forwarded_by: <processor>`; another kind of processor skips it
  (it forwards the original itself), and the speed and batch layers see one more
  identical copy, a resend they already remove.
- **Each partition's layout history** (the count in force from each offset on) travels
  with its committed offset, in the offset commit's metadata, written in the same
  transaction. So any later owner knows, for every offset below the committed one, under
  which count it was processed, and hence whether a record there was processed in place
  or forwarded.
- **After a change of the count,** the state of partition q is rebuilt from every record
  of any partition that was processed in place and whose home under the new count is
  q. Partition q's own history suffices while the count stays what its history says;
  another partition is read only below the offset where its history reached the current
  count.

Chosen over a repartition topic of fixed size (Kafka Streams' way; a second hop for every
record, forever) because the forwarding costs nothing while the count does not change,
and over rebuilding from the whole topic without forwarding because that cannot be exact
while producers still send to the old partitions. A consumer group's rebalance on the
count change is the barrier: every member commits what it processed under the old count
before any member processes under the new one (eager assignment: everything is revoked).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

FORWARDED_BY = "pos.forwarded_by"  # header of a forwarded record: the processor's name
FORWARDED_FROM = "pos.forwarded_from"  # header: "<partition>:<offset>" of the original
_PREFIX = "pos.layout="
_ENTRY = re.compile(r"^(\d+)@(\d+)$")


def home(key: bytes | None, count: int) -> int | None:
    """The partition librdkafka's default partitioner gives `key` among `count`; None for
    a record without a key (partitioned at random: it has no home)."""
    if not key:
        return None
    return zlib.crc32(key) % count


@dataclass(frozen=True)
class History:
    """The partition counts one input partition was processed under: `(from_offset,
    count)` pairs in ascending offset order, the first from offset 0."""

    entries: tuple[tuple[int, int], ...]

    @classmethod
    def starting(cls, count: int) -> History:
        return cls(((0, count),))

    @classmethod
    def decode(cls, metadata: str | None, count_now: int) -> History:
        """From an offset commit's metadata. A commit without one (written by a release
        before 0.2.0, or no commit yet) was processed under the count of today: that
        release processed every record in place and the topic cannot have grown under
        it without doubling, which its operators were told not to do."""
        if not metadata or not metadata.startswith(_PREFIX):
            return cls.starting(count_now)
        entries = []
        for part in metadata[len(_PREFIX) :].split(","):
            match = _ENTRY.match(part)
            if match is None:
                raise ValueError(f"unreadable layout history in offset metadata: {metadata!r}")
            entries.append((int(match[2]), int(match[1])))
        if not entries or entries[0][0] != 0 or entries != sorted(entries):
            raise ValueError(f"unreadable layout history in offset metadata: {metadata!r}")
        return cls(tuple(entries))

    def encode(self) -> str:
        return _PREFIX + ",".join(f"{count}@{offset}" for offset, count in self.entries)

    @property
    def current(self) -> int:
        return self.entries[-1][1]

    @property
    def largest(self) -> int:
        return max(count for _, count in self.entries)

    def at(self, offset: int) -> int:
        """The count the record at `offset` was (or will be) processed under."""
        count = self.entries[0][1]
        for start, entry_count in self.entries:
            if start > offset:
                break
            count = entry_count
        return count

    def extended(self, offset: int, count: int) -> History:
        """From `offset` on, processed under `count`."""
        if count == self.current:
            return self
        kept = tuple(e for e in self.entries if e[0] < offset)
        return History((*kept, (offset, count)) if kept else ((0, count),))

    def settled_from(self, count: int) -> int:
        """The first offset from which every record was processed under `count` (the
        start of the history's last run of `count`); records below it were processed
        under other counts. A history that never had `count` is settled nowhere."""
        start = None
        for offset, entry_count in reversed(self.entries):
            if entry_count != count:
                break
            start = offset
        return -1 if start is None else start


def processed_in_place(
    history: History,
    partition: int,
    offset: int,
    key: bytes | None,
    forwarded_by: str | None,
    processor: str,
) -> bool:
    """Whether `processor` applied its step to this record where it is (rather than
    forwarding it, or skipping another processor's forward)."""
    if forwarded_by is not None and forwarded_by != processor:
        return False
    target = home(key, history.at(offset))
    return target is None or target == partition


def belongs_to(key: bytes | None, partition: int, count: int, state_partition: int) -> bool:
    """Whether a record processed in place on `partition` is part of the state of
    `state_partition` under `count` partitions."""
    target = home(key, count)
    return (partition if target is None else target) == state_partition


def forwarded_by(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    for name, value in headers or ():
        if name == FORWARDED_BY:
            return value.decode(errors="replace")
    return None


def reads_for_rebuild(
    targets: set[int], count: int, histories: dict[int, History], committed: dict[int, int]
) -> list[tuple[int, int]]:
    """Which input partitions the states of `targets` are rebuilt from, under `count`
    partitions: `(partition, until)`, each read from offset 0 below `until`. A target's
    own partition up to its committed offset; another one only below the offset where its
    history settled on `count` (past it, a record processed in place has its home there,
    so it belongs to no other state)."""
    reads = []
    for partition in sorted(histories):
        until = committed.get(partition, 0)
        if partition not in targets:
            settled = histories[partition].settled_from(count)
            if settled >= 0:
                until = min(until, settled)
        if until > 0:
            reads.append((partition, until))
    return reads
