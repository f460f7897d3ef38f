"""A transactional processor's transaction life cycle, event by event (pure).

`step(limits, life, event)` is every decision of the shell (transactional/processor.py)
about its transaction: what happened (a record is about to be processed, a poll's
records are done, partitions are revoked or lost, a call failed for good, a commit went
through, the instance is asked to stop) and what to do about it, in order. The shell
turns what its Kafka clients do into events and carries out the actions; it never
decides on its own when to begin, commit or abort. Unit-tested with literal event
sequences and with Hypothesis driving `step` directly
(tests/unit/transactional/test_lifecycle.py).

The rules, each written once:

- A record opens a transaction if none is open (`Begin`); a transaction is closed by
  `Commit` once it holds `max_records` records or is `max_s` old (`Due`).
- **Commit before releasing partitions.** Partitions revoked while a transaction is open
  are committed first: their next owner starts from that commit. If it cannot commit,
  the transaction is aborted and every state is marked stale, since the assignment that
  follows may give any partition back. Lost partitions cannot be committed (the group
  moved on): their transaction is aborted.
- **An abort** (a call that failed with an abortable error, or a retriable one past its
  patience) aborts the open transaction and marks the states of the partitions it
  touched stale, then the consumer rewinds to the committed offsets, so that the
  replay starts from states that match them. Aborts in a row back off: 0.1 s after the
  second, doubling, at most 5 s. A commit ends the row.
- **Fatal errors** (fencing among them), and failed calls that no abort can mend
  (`init_transactions`, `begin_transaction`, `abort_transaction`), end the instance:
  from then on nothing is written, not even a commit on a later revocation.
- **On stop** an open transaction is committed (aborted if it cannot be) and the
  instance exits 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import TypeAlias

from pos_lambda.backoff import Backoff

EXIT_OK = 0
EXIT_FATAL = 3  # a fatal Kafka error: the instance stopped and wrote nothing more
EXIT_FENCED = 4  # another instance with the same transactional.id took over

# The wait after each abort without a commit but the first: 0.1 s, doubling, at most 5 s.
ABORT_BACKOFF = Backoff(0.1, cap_s=5.0)


class ErrorKind(StrEnum):
    """What a failed call means for the transaction (`processor.classify`)."""

    FENCED = "fenced"  # a newer instance has this transactional.id: stop
    FATAL = "fatal"  # the client is unusable: stop
    ABORT = "abort"  # the transaction must be aborted
    RETRY = "retry"  # worth calling again (the shell does, for a while)
    FAIL = "fail"  # anything else


class Call(StrEnum):
    """What failed: a client call (by its name), or where an error came from."""

    INIT = "init_transactions"
    BEGIN = "begin_transaction"
    PRODUCE = "produce"
    FLUSH = "flush"  # outputs the broker did not take
    SEND_OFFSETS = "send_offsets_to_transaction"
    COMMIT_TRANSACTION = "commit_transaction"
    COMMIT = "commit"  # at least once: the consumer's offset commit
    ABORT = "abort_transaction"
    CONSUME = "consume"  # an error the consumer returned as a record
    REBALANCE = "rebalance"  # an error inside a rebalance callback
    BACKGROUND = "background"  # the client's error callback
    LEASE = "lease"  # this instance's lease on its id was taken
    LAYOUT = "layout"  # the input topic has fewer partitions than it was processed with


# No abort can mend these: the transaction never began, or its abort itself failed.
UNMENDABLE = frozenset({Call.INIT, Call.BEGIN, Call.ABORT})


class Phase(Enum):
    IDLE = "idle"  # no transaction open
    OPEN = "open"  # a transaction open (at least once: a batch not committed yet)
    DEAD = "dead"  # stopped by a fatal error: nothing more is written
    DONE = "done"  # stopped as asked


class Closing(Enum):
    """Why the open transaction is being committed: what a failure of that commit means."""

    DUE = "due"  # big or old enough: abort, rewind, replay
    REVOKED = "revoked"  # its partitions go: abort, every state stale
    STOPPING = "stopping"  # the instance stops: abort, exit 0


@dataclass(frozen=True)
class Limits:
    """When a transaction is due: whichever limit it reaches first."""

    max_records: int  # ..._TRANSACTION_MAX_MESSAGES
    max_s: float  # ..._TRANSACTION_MAX_MS / 1000


@dataclass(frozen=True)
class Batch:
    """The open transaction: when it began and what it holds."""

    opened_at: float
    records: int = 0  # input records processed (forwarded ones included)
    outputs: int = 0  # records produced to the output topic
    forwards: int = 0  # records forwarded to their home partition (layout.py)
    touched: frozenset[int] = frozenset()  # partitions whose states it changed


@dataclass(frozen=True)
class Totals:
    """Since the instance started: what its logs and metrics report."""

    records: int = 0
    outputs: int = 0
    forwarded: int = 0
    commits: int = 0
    aborts: int = 0
    dead_letters: int = 0


@dataclass(frozen=True)
class Life:
    """One instance's transaction, as the shell knows it."""

    phase: Phase = Phase.IDLE
    batch: Batch | None = None  # while OPEN
    closing: Closing | None = None  # while a commit of the open batch is under way
    aborts_in_a_row: int = 0
    totals: Totals = Totals()
    exit_code: int | None = None  # once DEAD or DONE


# Events: what happened, `at` seconds on the shell's monotonic clock.


@dataclass(frozen=True)
class Polled:
    """A record of an owned partition is about to be processed."""

    at: float


@dataclass(frozen=True)
class Processed:
    """The record of the last `Polled` is processed: what it added to the transaction."""

    partition: int
    outputs: int
    forwarded: bool = False  # sent to its home partition, no state changed
    dead_lettered: bool = False  # its outputs were refused: a dead letter instead


@dataclass(frozen=True)
class Due:
    """A poll's records are processed: the open transaction may be big or old enough."""

    at: float


@dataclass(frozen=True)
class Committed:
    """The `Commit` went through: outputs and offsets are on the broker together."""


@dataclass(frozen=True)
class Failed:
    """A call failed for good (retriable errors already retried for their patience)."""

    call: Call
    kind: ErrorKind
    text: str  # the error, for the log


@dataclass(frozen=True)
class Revoked:
    """The group takes partitions away; they are released when the shell returns."""

    partitions: frozenset[int]


@dataclass(frozen=True)
class Lost:
    """The group moved on without this instance: its offsets cannot be committed."""

    partitions: frozenset[int]


@dataclass(frozen=True)
class Stop:
    pass


Event: TypeAlias = Polled | Processed | Due | Committed | Failed | Revoked | Lost | Stop


# Actions: what the shell does, in order. When one fails, the shell skips the rest and
# hands the failure back to `step`.


@dataclass(frozen=True)
class Begin:
    pass


@dataclass(frozen=True)
class Commit:
    """Commit the open batch: its outputs and the consumer's positions, together."""

    outputs: int  # the batch's outputs (a testing failpoint counts batches with some)


@dataclass(frozen=True)
class Abort:
    pass


@dataclass(frozen=True)
class MarkStale:
    """These partitions' states ran ahead of their committed offsets: rebuild them before
    they are used again (None: every partition's)."""

    partitions: frozenset[int] | None


@dataclass(frozen=True)
class Rewind:
    """Seek the consumer back to the committed offsets (rebuilding stale states)."""


@dataclass(frozen=True)
class Forget:
    """Drop these partitions' states: they belong to another instance now."""

    partitions: frozenset[int]


@dataclass(frozen=True)
class BackOff:
    seconds: float


@dataclass(frozen=True)
class Say:
    level: int  # logging.WARNING, ...
    text: str


@dataclass(frozen=True)
class Exit:
    code: int


Action: TypeAlias = Begin | Commit | Abort | MarkStale | Rewind | Forget | BackOff | Say | Exit


def abort_backoff_s(aborts_in_a_row: int) -> float:
    """The wait after the `aborts_in_a_row`th abort without a commit (none after the first)."""
    if aborts_in_a_row < 2:
        return 0.0
    return ABORT_BACKOFF.delay(aborts_in_a_row - 2)


def is_due(limits: Limits, life: Life, now: float) -> bool:
    batch = life.batch
    return batch is not None and (
        batch.records >= limits.max_records or now - batch.opened_at >= limits.max_s
    )


def wait_s(limits: Limits, life: Life, now: float, idle_s: float) -> float:
    """How long the next poll may wait: until the open transaction is due, or `idle_s`."""
    if life.batch is None:
        return idle_s
    return max(0.0, life.batch.opened_at + limits.max_s - now)


def room(limits: Limits, life: Life) -> int:
    """How many more records the open transaction (or a new one) takes."""
    return limits.max_records - (life.batch.records if life.batch else 0)


def step(limits: Limits, life: Life, event: Event) -> tuple[Life, list[Action]]:
    """The life after `event`, and what to do about it."""
    if life.phase in (Phase.DEAD, Phase.DONE):
        if isinstance(event, Lost):  # the states go whatever happened before
            return life, [Forget(event.partitions)]
        return life, []
    match event:
        case Polled(at=at):
            if life.phase is Phase.IDLE:
                return replace(life, phase=Phase.OPEN, batch=Batch(opened_at=at)), [Begin()]
            return life, []
        case Processed() if life.batch is not None:
            return _processed(life, life.batch, event), []
        case Due(at=at) if life.closing is None and is_due(limits, life, at):
            return _close(life, Closing.DUE)
        case Committed() if life.batch is not None:
            return _committed(life, life.batch)
        case Failed():
            return _failed(life, event)
        case Revoked() if life.phase is Phase.OPEN and life.closing is None:
            return _close(life, Closing.REVOKED)
        case Lost(partitions=partitions):
            if life.phase is Phase.OPEN:
                life, actions = _drop(life, "partitions lost")
                return life, [*actions, Forget(partitions)]
            return life, [Forget(partitions)]
        case Stop():
            if life.phase is Phase.OPEN and life.closing is None:
                return _close(life, Closing.STOPPING)
            if life.phase is Phase.IDLE:
                return _end(life, EXIT_OK, [])
    return life, []


def _processed(life: Life, batch: Batch, event: Processed) -> Life:
    touched = batch.touched if event.forwarded else batch.touched | {event.partition}
    batch = replace(
        batch,
        records=batch.records + 1,
        outputs=batch.outputs + (0 if event.dead_lettered else event.outputs),
        forwards=batch.forwards + event.forwarded,
        touched=touched,
    )
    totals = replace(life.totals, dead_letters=life.totals.dead_letters + event.dead_lettered)
    return replace(life, batch=batch, totals=totals)


def _close(life: Life, why: Closing) -> tuple[Life, list[Action]]:
    assert life.batch is not None
    return replace(life, closing=why), [Commit(life.batch.outputs)]


def _committed(life: Life, batch: Batch) -> tuple[Life, list[Action]]:
    t = life.totals
    totals = replace(
        t,
        records=t.records + batch.records,
        outputs=t.outputs + batch.outputs,
        forwarded=t.forwarded + batch.forwards,
        commits=t.commits + 1,
    )
    stopping = life.closing is Closing.STOPPING
    life = replace(
        life, phase=Phase.IDLE, batch=None, closing=None, aborts_in_a_row=0, totals=totals
    )
    return _end(life, EXIT_OK, []) if stopping else (life, [])


def _failed(life: Life, failed: Failed) -> tuple[Life, list[Action]]:
    if failed.kind in (ErrorKind.FENCED, ErrorKind.FATAL) or failed.call in UNMENDABLE:
        return _die(life, failed)
    why = failed.text
    match life.closing:
        case Closing.REVOKED:
            return _drop(life, f"revoked mid-transaction: {why}")
        case Closing.STOPPING:
            said = Say(logging.WARNING, f"could not commit on stop ({why}): aborting")
            life = replace(life, phase=Phase.IDLE, batch=None, closing=None)
            return _end(life, EXIT_OK, [said, Abort()])
    return _abort_and_rewind(life, why)


def _abort_and_rewind(life: Life, why: str) -> tuple[Life, list[Action]]:
    actions: list[Action] = [
        Say(logging.WARNING, f"aborting the open transaction ({why}); rewinding to the "
            "committed offsets"),
    ]  # fmt: skip
    touched = life.batch.touched if life.batch else frozenset()
    if life.phase is Phase.OPEN:
        actions.append(Abort())
    in_a_row = life.aborts_in_a_row + 1
    delay = abort_backoff_s(in_a_row)
    if delay:
        # The same trouble again (a refused output, a coordinator moving): back off
        # instead of hammering the broker with begin-produce-abort cycles.
        actions += [
            Say(logging.WARNING, f"{in_a_row} aborts in a row: backing off {delay:.1f} s"),
            BackOff(delay),
        ]
    # The replayed records would otherwise meet states that already saw them, look like
    # resends of themselves and emit nothing, and their offsets would be committed.
    actions += [MarkStale(touched), Rewind()]
    return _aborted(life, in_a_row), actions


def _drop(life: Life, why: str) -> tuple[Life, list[Action]]:
    """Abort the open transaction of partitions that are going away: no rewind (the
    next assignment decides where to read); every state ran ahead of its offset."""
    said = Say(logging.WARNING, f"aborting the open transaction: {why}")
    return _aborted(life, life.aborts_in_a_row), [said, Abort(), MarkStale(None)]


def _aborted(life: Life, aborts_in_a_row: int) -> Life:
    totals = replace(life.totals, aborts=life.totals.aborts + 1)
    return replace(
        life,
        phase=Phase.IDLE,
        batch=None,
        closing=None,
        aborts_in_a_row=aborts_in_a_row,
        totals=totals,
    )


def _die(life: Life, failed: Failed) -> tuple[Life, list[Action]]:
    fenced = failed.kind is ErrorKind.FENCED
    if failed.call is Call.LAYOUT:
        text = f"{failed.text}: stopping, writing nothing more"
    else:
        what = "fenced by a newer instance" if fenced else "fatal Kafka error"
        text = f"{what} ({failed.text}): stopping, writing nothing more"
    code = EXIT_FENCED if fenced else EXIT_FATAL
    life = replace(life, phase=Phase.DEAD, batch=None, closing=None, exit_code=code)
    return life, [Say(logging.ERROR, text), Exit(code)]


def _end(life: Life, code: int, actions: list[Action]) -> tuple[Life, list[Action]]:
    return replace(life, phase=Phase.DONE, exit_code=code), [*actions, Exit(code)]
