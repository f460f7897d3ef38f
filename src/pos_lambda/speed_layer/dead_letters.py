"""Export dead letters' whole values, one per line, for `pos-producer replay`.

To send them to the input topic again, use `pos-speed replay-dead-letters` (its own
filters and dry run: src/pos_lambda/speed_layer/replay.py); this export is for a file.

    python -m pos_lambda.speed_layer.dead_letters --reason schema_violation > replay.jsonl
    pos-producer replay replay.jsonl

A dead letter keeps only the first bytes of its value (`raw_value`, at most
src/pos_lambda/views/records.py DEAD_LETTER_PREFIX_BYTES) with the whole value's length and SHA-256:
Kafka accepts values far larger than any receipt, and a row must stay small whatever
the input. When a row holds less than the whole value, the bytes come from the master
dataset (which the archiver writes with every record as received), found by Kafka
coordinates with Spark and checked against the stored hash. Rows written before the
prefix (no length) hold their whole value.

`--reason` keeps the dead letters whose reason starts with it (all by default). The
replay file holds one message per line, so a value with a line break in it cannot be
exported this way: it is skipped and named on stderr, as is a value whose archived
bytes are missing or do not match the hash. Exit codes: 0 all exported, 1 some skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

Coordinates = tuple[str, int, int]  # Kafka topic, partition, offset


class DeadLetter(NamedTuple):
    topic: str
    partition: int
    offset: int
    raw_value: bytes | None  # the value's first bytes (the whole value in older rows)
    value_length: int | None  # None: a row written before prefixes (raw_value is whole)
    value_sha256: str | None
    reason: str
    kafka_timestamp: datetime | None = None  # when Kafka received the record (UTC)
    kafka_key: bytes | None = None

    @property
    def coordinates(self) -> Coordinates:
        return (self.topic, self.partition, self.offset)

    @property
    def whole(self) -> bool:
        """raw_value holds the whole value (or there is none)."""
        return self.value_length is None or len(self.raw_value or b"") == self.value_length


def to_fetch(dead: Iterable[DeadLetter]) -> list[Coordinates]:
    """The coordinates whose whole value must be read from the master dataset."""
    return sorted(d.coordinates for d in dead if not d.whole)


def export(
    dead: Iterable[DeadLetter], archived: Mapping[Coordinates, bytes]
) -> tuple[list[bytes], list[str]]:
    """(the lines to replay, why others were skipped), in the order of `dead`.

    `archived`: the master dataset's values of the coordinates `to_fetch` named.
    """
    lines: list[bytes] = []
    skipped: list[str] = []
    for d in dead:
        at = f"{d.topic}/{d.partition}@{d.offset}"
        value = d.raw_value if d.whole else archived.get(d.coordinates)
        if value is None:
            skipped.append(f"{at}: no value" if d.whole else f"{at}: not in the master dataset")
            continue
        if d.value_sha256 is not None and hashlib.sha256(value).hexdigest() != d.value_sha256:
            skipped.append(f"{at}: the archived value does not match its SHA-256")
        elif b"\n" in value or b"\r" in value:
            skipped.append(f"{at}: a line break in the value (one message per line)")
        elif value.strip():
            lines.append(value)
        else:
            skipped.append(f"{at}: a blank value (replay skips blank lines)")
    return lines, skipped


def read_dead_letters(settings: Any, reason: str = "") -> list[DeadLetter]:
    """Every row of the dead_letters table whose reason starts with `reason` (a scan:
    dead letters are few, and keyed by Kafka coordinates, not by reason)."""
    from pos_lambda.adapters import cassandra_client
    from pos_lambda.schemas import cql

    with cassandra_client.open_session(settings) as session:
        rows = session.execute(
            "SELECT kafka_topic, kafka_partition, kafka_offset, raw_value, value_length, "
            f"value_sha256, reason, kafka_timestamp, kafka_key FROM {cql.DEAD_LETTERS_TABLE}"
        )
        return [
            DeadLetter(
                r.kafka_topic,
                r.kafka_partition,
                r.kafka_offset,
                None if r.raw_value is None else bytes(r.raw_value),
                r.value_length,
                r.value_sha256,
                r.reason or "",
                # The driver returns naive UTC datetimes.
                None if r.kafka_timestamp is None else r.kafka_timestamp.replace(tzinfo=UTC),
                None if r.kafka_key is None else bytes(r.kafka_key),
            )
            for r in rows
            if (r.reason or "").startswith(reason)
        ]


def archived_values(settings: Any, wanted: list[Coordinates]) -> dict[Coordinates, bytes]:
    """The master dataset's values at these Kafka coordinates (a Spark job)."""
    if not wanted:
        return {}
    from pos_lambda.adapters.spark_session import build_session

    spark = build_session(settings, "pos-dead-letters")
    try:
        coords = spark.createDataFrame(
            wanted, "kafka_topic string, kafka_partition int, kafka_offset bigint"
        )
        rows = (
            spark.read.format("delta")
            .load(str(settings.master_dataset_dir))
            .join(coords, ["kafka_topic", "kafka_partition", "kafka_offset"], "left_semi")
            .select("kafka_topic", "kafka_partition", "kafka_offset", "raw_value")
            .collect()
        )
        return {
            (r.kafka_topic, r.kafka_partition, r.kafka_offset): bytes(r.raw_value)
            for r in rows
            if r.raw_value is not None
        }
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pos_lambda.speed_layer.dead_letters",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reason", default="", help="keep reasons that start with this")
    args = parser.parse_args(argv)
    from pos_lambda.settings import load_settings

    settings = load_settings()
    dead = read_dead_letters(settings, args.reason)
    lines, skipped = export(dead, archived_values(settings, to_fetch(dead)))
    for line in lines:
        sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()
    for why in skipped:
        print(f"skipped {why}", file=sys.stderr)
    print(f"{len(lines)} exported, {len(skipped)} skipped", file=sys.stderr)
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
