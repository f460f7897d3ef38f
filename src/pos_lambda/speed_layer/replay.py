"""`pos-speed replay-dead-letters`: send dead letters to the input topic again, after a fix.

    pos-speed replay-dead-letters --reason bad_price --since 2026-03-02T00:00Z --dry-run
    pos-speed replay-dead-letters --reason bad_price --since 24h

After the cause of some dead letters is fixed (a validator bug, a contract change), the
records they stand for are sent again, byte for byte, to POS_TOPIC_TRANSACTIONS with
the project's idempotent producer (`producer.kafka_sink`), each with its original Kafka
key (the same partition as its device's other copies) and its original Kafka timestamp
(so the replayed copy is exactly as late as the record was: the speed and batch layers'
`late` rule and lateness bound judge it as they would have judged it then). A dead
letter keeps only the value's first bytes when the value was large
(`views.records.DEAD_LETTER_PREFIX_BYTES`): those values come whole from the master
dataset, by Kafka coordinates (a Spark job), checked against the stored SHA-256.

Idempotent: records that are valid now count once in the views whatever the number of
replays, since the views keep one receipt per natural key (a second copy is a resend,
absorbed); records still invalid become dead letters again, at new coordinates, with
the same bytes. A replay sends each distinct value once (by its SHA-256), so a record
that failed again, and so has two dead letters, is not sent twice by the next replay.
The dead-letter rows stay as the audit trail.

The selection is pure (`parse_reason`, `parse_since`, `select`, `resolve`), the shell
is `replay`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from pos_lambda.schemas.contract import REASONS, reason_code
from pos_lambda.speed_layer.dead_letters import Coordinates, DeadLetter, to_fetch

EXIT_SKIPPED = 1  # some selected dead letters could not be resolved to their whole value
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class SelectionError(ValueError):
    """A --reason or --since the command cannot use; the message says what it takes."""


def parse_reason(text: str) -> str:
    """A reason code (`bad_price`), or a code with its field path
    (`missing_field:transactions.0.price`), as the dead letters record it."""
    if reason_code(text) not in REASONS:
        valid = "\n".join(f"  {code:<24} {what}" for code, what in REASONS.items())
        raise SelectionError(
            f"--reason: {text!r} is not a dead-letter reason; valid reasons (a code, or "
            f"code:field.path to narrow it):\n{valid}"
        )
    return text


def parse_since(text: str, now: datetime) -> datetime:
    """An ISO-8601 instant with an offset (`2026-03-02T08:00Z`) or a duration back from
    `now` (`90m`, `24h`, `7d`); UTC."""
    duration = _DURATION.match(text.strip())
    if duration:
        return now - timedelta(**{_UNITS[duration[2]]: float(duration[1])})
    try:
        instant = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        instant = None
    if instant is None or instant.tzinfo is None:
        raise SelectionError(
            f"--since: {text!r} is neither an ISO-8601 instant with an offset "
            "(2026-03-02T08:00Z, 2026-03-02T09:00+01:00) nor a duration back from now "
            "(90m, 24h, 7d)"
        )
    if instant > now:
        raise SelectionError(f"--since: {text!r} is in the future (now: {now.isoformat()})")
    return instant.astimezone(UTC)


def matches(reason: str, wanted: str) -> bool:
    """`wanted` names this reason: the same, or its code or a leading part of its
    field path (`missing_field` and `missing_field:transactions` name
    `missing_field:transactions.0.price`)."""
    return reason == wanted or reason.startswith(wanted + (":" if ":" not in wanted else "."))


def value_id(dead: DeadLetter) -> str | None:
    """The whole value's SHA-256 (rows written before prefixes hold the whole value)."""
    if dead.value_sha256 is not None:
        return dead.value_sha256
    return None if dead.raw_value is None else hashlib.sha256(dead.raw_value).hexdigest()


@dataclass(frozen=True)
class Selection:
    chosen: list[DeadLetter]  # one per distinct value, in the order they reached Kafka
    same_value: int  # further dead letters of a chosen value (a record that failed again)
    no_value: int  # dead letters of records without a value: nothing to send


def select(dead: Iterable[DeadLetter], reason: str, since: datetime) -> Selection:
    """The dead letters to replay: of `reason`, received by Kafka at or after `since`,
    one per distinct value (the first received), ordered by Kafka arrival."""
    wanted = sorted(
        (
            d
            for d in dead
            if matches(d.reason, reason) and d.kafka_timestamp is not None
            and d.kafka_timestamp >= since
        ),
        key=lambda d: (d.kafka_timestamp, d.topic, d.partition, d.offset),
    )  # fmt: skip
    chosen: list[DeadLetter] = []
    seen: set[str] = set()
    same = empty = 0
    for d in wanted:
        identity = value_id(d)
        if identity is None:
            empty += 1
        elif identity in seen:
            same += 1
        else:
            seen.add(identity)
            chosen.append(d)
    return Selection(chosen, same, empty)


@dataclass(frozen=True)
class Resend:
    dead: DeadLetter
    value: bytes
    source: str  # "dead letter" (its row holds the whole value) or "master dataset"


def resolve(
    chosen: Iterable[DeadLetter], archived: Mapping[Coordinates, bytes]
) -> tuple[list[Resend], list[str]]:
    """(what to send, why others cannot be), in the order of `chosen`. `archived`: the
    master dataset's values of the coordinates `to_fetch` named."""
    resends: list[Resend] = []
    skipped: list[str] = []
    for d in chosen:
        at = f"{d.topic}/{d.partition}@{d.offset}"
        if d.whole:
            value, source = d.raw_value, "dead letter"
        else:
            value, source = archived.get(d.coordinates), "master dataset"
        if value is None:
            skipped.append(f"{at}: not in the master dataset (VACUUMed, or another table)")
        elif d.value_sha256 is not None and hashlib.sha256(value).hexdigest() != d.value_sha256:
            skipped.append(f"{at}: the {source}'s value does not match its SHA-256")
        else:
            resends.append(Resend(d, value, source))
    return resends, skipped


def describe(r: Resend) -> str:
    """One line of the --dry-run listing."""
    d = r.dead
    when = d.kafka_timestamp.isoformat() if d.kafka_timestamp else "?"
    sha = hashlib.sha256(r.value).hexdigest()[:12]
    return (
        f"{d.topic}/{d.partition}@{d.offset}  received {when}  {d.reason}  "
        f"{len(r.value)} bytes from the {r.source}  sha256 {sha}"
    )


def replay(
    settings: Any, reason: str, since: datetime, dry_run: bool, out: IO[str] = sys.stdout
) -> int:
    """The command: read the dead letters, choose, resolve, list or send; prints the
    listing (dry run) or nothing per record, then one JSON summary line."""
    from pos_lambda.speed_layer.dead_letters import archived_values, read_dead_letters

    selection = select(read_dead_letters(settings), reason, since)
    resends, skipped = resolve(
        selection.chosen, archived_values(settings, to_fetch(selection.chosen))
    )
    if dry_run:
        for r in resends:
            print(describe(r), file=out)
    else:
        _send(settings, resends)
    for why in skipped:
        print(f"skipped {why}", file=sys.stderr)
    summary = {
        "reason": reason,
        "since": since.isoformat(),
        "topic": settings.topics.transactions,
        "dry_run": dry_run,
        "selected": len(selection.chosen),
        "sent": 0 if dry_run else len(resends),
        "would_send": len(resends) if dry_run else 0,
        "from_master_dataset": sum(r.source == "master dataset" for r in resends),
        "same_value_skipped": selection.same_value,
        "without_value": selection.no_value,
        "unresolved": len(skipped),
    }
    print(json.dumps(summary), file=out, flush=True)
    return EXIT_SKIPPED if skipped else 0


def _send(settings: Any, resends: list[Resend]) -> None:
    from pos_lambda.producer.kafka_sink import check_topic, produce
    from pos_lambda.producer.simulation import OutgoingMessage

    security = settings.kafka.security_config
    topic = settings.topics.transactions
    check_topic(settings.bootstrap_servers, topic, security=security)
    produce(
        (
            OutgoingMessage(
                key=r.dead.kafka_key,
                value=r.value,
                # As received: the replayed copy is as late as the record was.
                timestamp_ms=int(r.dead.kafka_timestamp.timestamp() * 1000)
                if r.dead.kafka_timestamp
                else 0,
                kind="replay",
            )
            for r in resends
        ),
        settings.bootstrap_servers,
        topic,
        quiet=True,
        security=security,
    )
