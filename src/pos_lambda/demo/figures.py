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

from pos_lambda.demo.story import Audited, n

# What strikes while the stream is produced, besides the alerts processor's own kills.
STREAM_FAULTS = ("speed_kill", "speed_kill", "speed_kill", "kafka_restart",
                 "cassandra_restart", "batch_kill")  # fmt: skip
LABELS = {
    "speed_kill": "kill -9 of the speed-layer driver (mid micro-batch)",
    "kafka_restart": "Kafka broker hard restart (kill -9, start)",
    "cassandra_restart": "Cassandra restart (kill -9, start)",
    "alerts_kill": "kill -9 of the alerts processor mid-transaction",
    "batch_kill": "kill -9 of the batch job mid-write",
}


@dataclass(frozen=True)
class Planned:
    kind: str
    at: float  # fraction of the stream's messages sent when it strikes


@dataclass(frozen=True)
class Plan:
    faults: list[Planned]  # in the order they strike
    alerts_crash_at: list[int]  # the processor kills itself in this transaction (per start)


def plan(seed: int, faults: tuple[str, ...] = STREAM_FAULTS, alerts_kills: int = 2) -> Plan:
    """One fault per equal slot of [0.05, 0.85) of the stream, kinds shuffled, each at a
    random point of its slot: random, yet never two at once, and all while producing."""
    rng = random.Random(seed)
    kinds = list(faults)
    rng.shuffle(kinds)
    lo, hi = 0.05, 0.85
    width = (hi - lo) / max(len(kinds), 1)
    planned = [
        Planned(kind, round(lo + width * (i + rng.uniform(0.1, 0.9)), 4))
        for i, kind in enumerate(kinds)
    ]
    return Plan(planned, [rng.randint(3, 30) for _ in range(alerts_kills)])


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
    planned: int  # faults planned (stream faults + alerts kills)
    restarts: int  # processes the orchestrator had to start again after a fault
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
    order = ["speed_kill", "kafka_restart", "cassandra_restart", "alerts_kill", "batch_kill"]
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
            f"conflicting copies) / {n(facts.duplicates_removed)} (batch run)",
        ),
        (
            "conflicts injected / found",
            f"{n(facts.conflicts_injected)} / {n(facts.conflicts_found)} (batch run), "
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
