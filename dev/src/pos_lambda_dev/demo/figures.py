"""The chaos run's plan and its figures table (pure: no I/O, no clock).

`plan` draws, from a seed, where in the stream each fault strikes (a fraction of the
messages sent) and at which transaction the alerts processor kills itself; `render`
turns what happened (`ChaosFacts`) into the Markdown table `pos-chaos` prints and
writes to docs/chaos.md; `as_json` is the same as data (docs/chaos.json).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from pos_lambda_dev.demo.faults import FAULTS, SCHEDULE
from pos_lambda_dev.demo.story import Audited, n

# What strikes while the stream is produced, and how the table names each fault: both
# from the faults' registry (pos_lambda_dev.demo.faults), where each fault is defined.
STREAM_FAULTS = tuple(f.name for f in SCHEDULE)
LABELS = {f.name: f.label for f in FAULTS}
# Where in the stream (fractions of its messages) the faults strike by default: after
# the start, before the end, so that every one strikes while the stream flows.
DEFAULT_WINDOW = (0.05, 0.85)


@dataclass(frozen=True)
class Planned:
    kind: str
    at: float  # fraction of the stream's messages sent when it strikes


@dataclass(frozen=True)
class Plan:
    faults: list[Planned]  # in the order they strike


def plan(
    seed: int,
    faults: tuple[str, ...] = STREAM_FAULTS,
    window: tuple[float, float] = DEFAULT_WINDOW,
) -> Plan:
    """One fault per equal slot of `window` ([0.05, 0.85) of the stream by default),
    kinds shuffled, each at a random point of its slot: random, yet never two at once.
    A window at the stream's start (e.g. [0, 0.15)) puts faults before what they act on
    exists (no master dataset, no committed batch): the run must wait for it, not fail."""
    rng = random.Random(seed)
    kinds = list(faults)
    rng.shuffle(kinds)
    lo, hi = window
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"fault window {window}: need 0 <= start < end <= 1")
    width = (hi - lo) / max(len(kinds), 1)
    return Plan([
        Planned(kind, round(lo + width * (i + rng.uniform(0.1, 0.9)), 4))
        for i, kind in enumerate(kinds)
    ])  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    kind: str
    at_message: int  # messages sent when it struck
    recovered_s: float | None  # until it worked again (None: not measured)
    detail: str


@dataclass(frozen=True)
class ChaosFacts:
    count: int
    seed: int
    full: bool  # the 100,000 receipts (else an honestly labelled smaller run)
    messages: int
    resends: int
    conflicts_injected: int
    malformed: int
    late: int
    beyond_bound: int
    outcomes: list[Outcome]
    planned: int  # faults planned
    restarts: int  # processes the orchestrator had to start again after a fault
    # Summed over the committed batch runs: each folds the records archived since the
    # one before (killed and refused runs commit nothing), so no record counts twice.
    duplicates_removed: int
    conflicts_found: int
    conflict_rows: int
    conflict_alerts: int | None
    dead_letters: int
    batch_via: str
    audit: Audited
    seconds: float
    when: str
    commit: str
    notes: list[str] = field(default_factory=list)
    # Receipts the broker lost after acknowledging them (chaos.check_input_topic):
    # [operation_id, vendor_fiscal_module, transaction_id, window_start].
    broker_lost: list[list[Any]] = field(default_factory=list)


def exact_totals(audit: Audited) -> tuple[int, int, int]:
    exact = [v for v in audit.views if v.exact]
    return (
        sum(v.lost for v in exact),
        sum(v.duplicated for v in exact),
        sum(v.wrong for v in exact),
    )


def _faults_cell(facts: ChaosFacts) -> str:
    done: dict[str, int] = {}
    for o in facts.outcomes:
        done[o.kind] = done.get(o.kind, 0) + 1
    order = list(LABELS)
    parts = [f"{LABELS[k]} x{done[k]}" for k in order if k in done]
    return f"{len(facts.outcomes)} of {facts.planned}: " + "; ".join(parts)


def render(facts: ChaosFacts) -> str:
    lost, dup, wrong = exact_totals(facts.audit)
    title = (
        f"Chaos run: {n(facts.count)} receipts"
        if facts.full
        else f"Chaos run (SMALLER than the issue's 100,000: {n(facts.count)} receipts)"
    )
    dup_injected = facts.resends + facts.conflicts_injected
    conflict_alerts = (
        f", {n(facts.conflict_alerts)} conflict alerts" if facts.conflict_alerts is not None else ""
    )
    rows = [
        ("messages produced", f"{n(facts.messages)} ({n(facts.count)} unique receipts)"),
        ("faults survived", _faults_cell(facts)),
        ("processes restarted after a fault", n(facts.restarts)),
        (
            "duplicates injected / removed",
            f"{n(dup_injected)} ({n(facts.resends)} resends + {n(facts.conflicts_injected)} "
            f"conflicting copies) / {n(facts.duplicates_removed)} (committed batch runs)",
        ),
        (
            "conflicts injected / found",
            f"{n(facts.conflicts_injected)} / {n(facts.conflicts_found)} (committed batch runs), "
            f"{n(facts.conflict_rows)} rows in `conflicts`{conflict_alerts}",
        ),
        (
            "bad inputs injected / routed",
            f"{n(facts.malformed)} malformed / {n(facts.dead_letters)} dead letters",
        ),
        (
            "late receipts (beyond the speed bound)",
            f"{n(facts.late)} ({n(facts.beyond_bound)}, served by the batch layer)",
        ),
        ("batch layer run", facts.batch_via),
        ("lost (exact views)", n(lost)),
        ("duplicated (exact views)", n(dup)),
        ("wrong (exact views)", n(wrong)),
        ("audit", "clean" if facts.audit.clean else f"DISCREPANCIES ({facts.audit.report})"),
    ]
    out = [
        f"## {title}",
        "",
        f"Seed {facts.seed}, {facts.when}, commit {facts.commit}, {facts.seconds / 60:.1f} min.",
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
        "",
        "| view | exact | expected | observed | lost | duplicated | wrong |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {v.name} | {'yes' if v.exact else 'no'} | {n(v.expected)} | {n(v.observed)} "
            f"| {n(v.lost)} | {n(v.duplicated)} | {n(v.wrong)} |"
            for v in facts.audit.views
        ),
        "",
        "| # | fault | at message | recovered in | detail |",
        "|---|---|---|---|---|",
        *(
            f"| {i} | {LABELS[o.kind]} | {n(o.at_message)} | "
            f"{'-' if o.recovered_s is None else f'{o.recovered_s:.0f} s'} | {o.detail} |"
            for i, o in enumerate(facts.outcomes, 1)
        ),
    ]
    out += [f"\nNote: {note}" for note in facts.notes]
    return "\n".join(out) + "\n"


def as_json(facts: ChaosFacts) -> dict[str, Any]:
    lost, dup, wrong = exact_totals(facts.audit)
    doc = asdict(facts)
    doc["totals"] = {"lost": lost, "duplicated": dup, "wrong": wrong}
    return doc
