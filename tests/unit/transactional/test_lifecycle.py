"""The transaction life cycle (src/pos_lambda/transactional/lifecycle.py), pure: literal
event sequences, then Hypothesis driving `step` directly through drawn sequences of
records, polls, rebalances, failures and stops, as the shell would hand them over (every
`Commit` answered at once by `Committed` or a failure), checked against a model written
here: transactions never nest, nothing is written after an exit, a revocation commits
before the partitions go, an abort marks every state it touched stale, aborts in a row
back off, the totals count what was committed, and stop always ends in an exit.

The shell's own properties, on the in-memory broker, are test_exactly_once_properties.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from pos_lambda.transactional.lifecycle import (
    EXIT_FATAL,
    EXIT_FENCED,
    UNMENDABLE,
    Abort,
    Action,
    BackOff,
    Begin,
    Call,
    Closing,
    Commit,
    Committed,
    Due,
    ErrorKind,
    Event,
    Exit,
    Failed,
    Forget,
    Life,
    Limits,
    Lost,
    MarkStale,
    Phase,
    Polled,
    Processed,
    Revoked,
    Rewind,
    Say,
    Stop,
    abort_backoff_s,
    step,
    wait_s,
)
from tests.unit.transactional.test_exactly_once_properties import examples

LIMITS = Limits(max_records=3, max_s=0.1)
P0, P01 = frozenset({0}), frozenset({0, 1})


def run(*events: Event, life: Life | None = None) -> tuple[Life, list[Action]]:
    life, done = life or Life(), []
    for event in events:
        life, actions = step(LIMITS, life, event)
        done += actions
    return life, done


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions if not isinstance(a, Say)]


def opened(*partitions: int, at: float = 0.0) -> Life:
    life, _ = run(*[e for p in partitions for e in (Polled(at), Processed(p, 1))])
    return life


# --- literal sequences ---------------------------------------------------------------


def test_the_first_record_begins_a_transaction_and_the_limit_commits_it() -> None:
    life, actions = run(Polled(0.0))
    assert (life.phase, actions) == (Phase.OPEN, [Begin()])
    life, actions = run(Processed(0, 2), Polled(0.01), Processed(1, 0), Due(0.02), life=life)
    assert actions == []  # two records, 20 ms: not due
    life, actions = run(Polled(0.03), Processed(1, 1), Due(0.03), life=life)
    assert actions == [Commit(outputs=3)]
    life, actions = run(Committed(), life=life)
    assert (life.phase, life.totals.records, life.totals.outputs, life.totals.commits) == (
        Phase.IDLE, 3, 3, 1,
    )  # fmt: skip


def test_an_old_transaction_is_due_and_the_poll_waits_until_then() -> None:
    life = opened(0, at=1.0)
    assert wait_s(LIMITS, life, 1.04, idle_s=0.5) == 0.06000000000000005
    assert wait_s(LIMITS, Life(), 1.04, idle_s=0.5) == 0.5
    assert run(Due(1.09), life=life)[1] == []
    assert run(Due(1.1), life=life)[1] == [Commit(outputs=1)]


def test_revoked_partitions_are_committed_before_they_go() -> None:
    life, actions = run(Revoked(P0), life=opened(0, 1))
    assert actions == [Commit(outputs=2)]
    life, actions = run(Committed(), life=life)
    assert (life.phase, actions) == (Phase.IDLE, [])
    assert run(Revoked(P0))[1] == []  # nothing open: nothing to commit


def test_a_revocation_that_cannot_commit_aborts_and_every_state_is_stale() -> None:
    life, _ = run(Revoked(P0), life=opened(0))
    life, actions = run(Failed(Call.COMMIT_TRANSACTION, ErrorKind.ABORT, "x"), life=life)
    assert actions == [
        Say(logging.WARNING, "aborting the open transaction: revoked mid-transaction: x"),
        Abort(),
        MarkStale(None),
    ]
    assert (life.phase, life.totals.aborts, life.aborts_in_a_row) == (Phase.IDLE, 1, 0)


def test_lost_partitions_are_aborted_never_committed_and_their_states_forgotten() -> None:
    life, actions = run(Lost(P0), life=opened(0))
    assert kinds(actions) == ["Abort", "MarkStale", "Forget"]
    assert actions[-1] == Forget(P0) and life.totals.aborts == 1
    assert run(Lost(P0))[1] == [Forget(P0)]


def test_an_abort_rewinds_its_touched_partitions_and_aborts_in_a_row_back_off() -> None:
    failure = Failed(Call.PRODUCE, ErrorKind.ABORT, "produce: x")
    life, actions = run(failure, life=opened(0, 2))
    assert actions == [
        Say(logging.WARNING, "aborting the open transaction (produce: x); rewinding to the "
            "committed offsets"),
        Abort(),
        MarkStale(frozenset({0, 2})),
        Rewind(),
    ]  # fmt: skip
    delays = []
    for _ in range(8):
        life, actions = run(Polled(0.0), Processed(1, 0), failure, life=life)
        delays += [a.seconds for a in actions if isinstance(a, BackOff)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    life, _ = run(Polled(0.0), Due(1.0), Committed(), life=life)
    life, actions = run(Polled(0.0), failure, life=life)
    assert not [a for a in actions if isinstance(a, BackOff)]  # a commit ended the row


def test_a_forwarded_record_touches_no_state() -> None:
    life, _ = run(Polled(0.0), Processed(0, 0, forwarded=True))
    life, actions = run(Failed(Call.FLUSH, ErrorKind.ABORT, "1 deliveries failed"), life=life)
    assert MarkStale(frozenset()) in actions


def test_fatal_errors_and_unmendable_calls_end_the_instance_and_nothing_is_written_after() -> None:
    life, actions = run(Failed(Call.COMMIT_TRANSACTION, ErrorKind.FENCED, "e"), life=opened(0))
    assert actions == [
        Say(logging.ERROR, "fenced by a newer instance (e): stopping, writing nothing more"),
        Exit(EXIT_FENCED),
    ]
    assert run(Revoked(P0), Polled(1.0), Stop(), life=life)[1] == []
    assert run(Lost(P0), life=life)[1] == [Forget(P0)]
    for call in UNMENDABLE:
        life, actions = run(Failed(call, ErrorKind.RETRY, "e"), life=opened(0))
        assert (life.exit_code, actions[-1]) == (EXIT_FATAL, Exit(EXIT_FATAL))


def test_a_refused_layout_says_why() -> None:
    _, actions = run(Failed(Call.LAYOUT, ErrorKind.FATAL, "t has 2 partitions"))
    assert actions[0] == Say(logging.ERROR, "t has 2 partitions: stopping, writing nothing more")


def test_stop_commits_the_open_transaction_or_aborts_it_and_exits_0() -> None:
    assert run(Stop()) == (Life(phase=Phase.DONE, exit_code=0), [Exit(0)])
    life, actions = run(Stop(), Committed(), life=opened(0))
    assert actions == [Commit(outputs=1), Exit(0)] and life.totals.commits == 1
    life, actions = run(Stop(), Failed(Call.SEND_OFFSETS, ErrorKind.RETRY, "x"), life=opened(0))
    assert kinds(actions) == ["Commit", "Abort", "Exit"] and life.exit_code == 0
    life, actions = run(Stop(), Failed(Call.SEND_OFFSETS, ErrorKind.FATAL, "x"), life=opened(0))
    assert actions[-1] == Exit(EXIT_FATAL)


# --- properties: Hypothesis drives step() -----------------------------------------------

partitions = st.frozensets(st.integers(0, 2), min_size=1, max_size=3)
record = st.tuples(  # a record of a partition: its outputs, forwarded, dead-lettered
    st.just("record"), st.integers(0, 2), st.integers(0, 3), st.booleans(), st.booleans()
)
poll_done = st.tuples(st.just("poll done"), st.sampled_from([0.0, 0.01, 0.05, 0.2]))
failed = st.tuples(st.just("failed"), st.sampled_from(list(Call)), st.sampled_from(list(ErrorKind)))
aborting = st.tuples(
    st.just("failed"),
    st.sampled_from([c for c in Call if c not in UNMENDABLE]),
    st.sampled_from([ErrorKind.ABORT, ErrorKind.RETRY, ErrorKind.FAIL]),
)
# Mostly records, polls and failures that abort: a stop or a fatal error ends a sequence.
moves = st.one_of(
    *[record] * 4,
    *[poll_done] * 3,
    st.tuples(st.just("revoked"), partitions),
    st.tuples(st.just("lost"), partitions),
    aborting,
    failed,
    st.just(("stop",)),
)
# How a Commit (or a Begin) the shell carries out ends.
outcomes = st.sampled_from(
    [*[None] * 6, ErrorKind.ABORT, ErrorKind.RETRY, *ErrorKind]
)  # None: it went through
COMMIT_CALLS = [Call.SEND_OFFSETS, Call.COMMIT_TRANSACTION, Call.COMMIT, Call.FLUSH]


@dataclass
class Model:
    """What the checks expect, kept apart from Life."""

    open: bool = False
    opened_at: float = 0.0
    records: int = 0
    outputs: int = 0
    touched: set[int] = field(default_factory=set)
    exited: int | None = None
    in_a_row: int = 0
    commits: int = 0
    committed_records: int = 0
    aborts: int = 0


@dataclass
class Driver:
    """The shell's side of the protocol, and the checks."""

    draw: st.DataObject
    life: Life = field(default_factory=Life)
    model: Model = field(default_factory=Model)
    now: float = 0.0

    def feed(self, event: Event) -> list[Action]:
        m = self.model
        was_open, closing = m.open, self.life.closing
        self.life, actions = step(LIMITS, self.life, event)
        if m.exited is not None:  # nothing is written after an exit
            assert all(isinstance(a, Forget) for a in actions), (event, actions)
        if isinstance(event, Revoked) and was_open and m.exited is None:
            assert actions == [Commit(m.outputs)], "commit before releasing partitions"
        if isinstance(event, Lost) and was_open and m.exited is None:
            assert kinds(actions) == ["Abort", "MarkStale", "Forget"]
            assert actions[-1] == Forget(event.partitions)
            self.aborted(count=True, rewound=False)
        if isinstance(event, Due) and m.exited is None:
            due = m.open and (m.records >= 3 or event.at - m.opened_at >= 0.1)
            assert (Commit(m.outputs) in actions) is due, (event, actions)
        if isinstance(event, Failed) and m.exited is None:
            self.check_failure(event, actions, closing)
        for n, action in enumerate(actions):
            self.check_action(action)
            if isinstance(action, Commit | Begin) and not self.carry_out(action, actions, n):
                break
        return actions

    def check_action(self, action: Action) -> None:
        m = self.model
        match action:
            case Begin():
                assert not m.open, "transactions never nest"
                m.open, m.opened_at, m.records, m.outputs, m.touched = True, self.now, 0, 0, set()
            case Commit() | Abort():
                assert m.open, f"{action} without a transaction"
                m.open = m.open if isinstance(action, Commit) else False
            case Exit(code=code):
                assert m.exited is None, "one exit"
                m.exited, m.open = code, False

    def carry_out(self, action: Commit | Begin, actions: list[Action], n: int) -> bool:
        """Answer `action` as the shell would; False if it failed (the rest is skipped)."""
        kind = self.draw.draw(outcomes)
        if kind is None:
            if isinstance(action, Commit):
                m = self.model
                m.open, m.in_a_row, m.commits = False, 0, m.commits + 1
                m.committed_records += m.records
                self.feed(Committed())
            return True
        call = Call.BEGIN if isinstance(action, Begin) else self.draw.draw(
            st.sampled_from(COMMIT_CALLS)
        )  # fmt: skip
        self.feed(Failed(call, kind, "x"))
        return False

    def check_failure(self, failed: Failed, actions: list[Action], closing: Closing | None) -> None:
        m = self.model
        if failed.kind in (ErrorKind.FENCED, ErrorKind.FATAL) or failed.call in UNMENDABLE:
            code = EXIT_FENCED if failed.kind is ErrorKind.FENCED else EXIT_FATAL
            assert actions[-1] == Exit(code) and Abort() not in actions
            return
        stale = [a for a in actions if isinstance(a, MarkStale)]
        if closing is Closing.STOPPING:  # not counted as an abort
            assert kinds(actions) == ["Abort", "Exit"] and actions[-1] == Exit(0)
            return
        if closing is Closing.REVOKED:
            assert stale == [MarkStale(None)] and Rewind() not in actions
            self.aborted(count=True, rewound=False)
            return
        # An abort and a rewind: every state the transaction touched is stale.
        assert stale == [MarkStale(frozenset(m.touched if m.open else ()))], (actions, m)
        assert actions[-1] == Rewind() and (Abort() in actions) is m.open
        self.aborted(count=True, rewound=True)
        delays = [a.seconds for a in actions if isinstance(a, BackOff)]
        assert delays == ([abort_backoff_s(m.in_a_row)] if m.in_a_row > 1 else [])

    def aborted(self, count: bool, rewound: bool) -> None:
        m = self.model
        m.aborts += count
        m.in_a_row += rewound

    def move(self, move: tuple[object, ...]) -> None:
        m = self.model
        match move:
            case ("record", int(p), int(outputs), bool(forwarded), bool(dead)):
                if m.exited is not None:
                    return  # the shell's loop has ended
                self.feed(Polled(self.now))
                if self.life.phase is Phase.OPEN:
                    self.feed(Processed(p, outputs, forwarded, dead))
                    m.records += 1
                    m.outputs += 0 if dead else outputs
                    m.touched |= set() if forwarded else {p}
            case ("poll done", float(dt)):
                self.now += dt
                if m.exited is None:
                    self.feed(Due(self.now))
            case ("revoked", frozenset() as ps):
                self.feed(Revoked(ps))
            case ("lost", frozenset() as ps):
                self.feed(Lost(ps))
            case ("failed", Call() as call, ErrorKind() as kind):
                if m.exited is None:
                    self.feed(Failed(call, kind, "x"))
            case ("stop",):
                if m.exited is None:
                    self.feed(Stop())
                    assert self.life.exit_code is not None, "stop always ends in an exit"


@hypothesis_settings(max_examples=examples(1000))
@given(st.lists(moves, min_size=10, max_size=40), st.data())
def test_the_life_cycle_keeps_its_rules_through_any_sequence_of_events(
    drawn: list[tuple[object, ...]], data: st.DataObject
) -> None:
    driver = Driver(data)
    for move in drawn:
        driver.move(move)
    life, m = driver.life, driver.model
    assert (life.totals.commits, life.totals.records) == (m.commits, m.committed_records)
    assert life.totals.aborts == m.aborts
    assert life.exit_code == m.exited
    assert (life.phase is Phase.OPEN) == m.open
