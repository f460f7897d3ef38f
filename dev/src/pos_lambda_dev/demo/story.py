"""The demo's printed story, built from plain facts (pure: no I/O, no clock).

`pos-demo` (dev/src/pos_lambda_dev/demo/cli.py) gathers the facts from the ledger, the
layers' own tables, Airflow's API and the auditor's JSON, and `render` turns them into
the short text it prints at the end (and keeps in `.state/demo/story.txt`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class Produced:
    unique_receipts: int
    messages: int
    stores: int
    devices: int
    skewed_devices: int
    first_happened: datetime
    last_happened: datetime
    topic: str
    ledger: str


@dataclass(frozen=True)
class Injected:
    resends: int
    bursts: int
    late: int
    beyond_bound: int  # late receipts later than the speed layer's bound
    bound_hours: float
    out_of_order: int
    malformed: dict[str, int]  # kind -> count
    conflicts: int
    clock_skew_max_s: float

    @property
    def total(self) -> int:
        return (
            self.resends
            + self.bursts
            + self.late
            + self.out_of_order
            + sum(self.malformed.values())
            + self.conflicts
        )


@dataclass(frozen=True)
class SpeedSeen:
    micro_batches: int
    seconds: float
    valid: int
    invalid: int
    resends_absorbed: int
    conflicts: int
    late: int
    beyond_bound: int


@dataclass(frozen=True)
class AlertsSeen:
    by_rule: dict[str, int]
    seconds: float


@dataclass(frozen=True)
class BatchSeen:
    dag_run_id: str
    interval_start: datetime
    interval_end: datetime
    lookback_hours: float
    seconds: float
    input_rows: int
    receipts: int
    duplicates_removed: int
    conflicts: int
    beyond_speed_bound: int
    windows_fixed: int
    receipts_fixed: int


@dataclass(frozen=True)
class Served:
    store: int
    day: str
    windows: int
    receipts: int
    revenue: Decimal
    from_batch: int
    from_speed: int
    final: int
    horizon: datetime | None


@dataclass(frozen=True)
class ViewAudit:
    name: str
    exact: bool
    expected: int
    observed: int
    lost: int
    duplicated: int
    wrong: int


@dataclass(frozen=True)
class Audited:
    clean: bool
    views: list[ViewAudit]
    report: str  # where the auditor's JSON is


@dataclass(frozen=True)
class DemoFacts:
    produced: Produced
    injected: Injected
    speed: SpeedSeen
    batch: BatchSeen
    served: Served
    audit: Audited
    alerts: AlertsSeen | None = None
    seconds: float = 0.0
    logs: str = ""
    notes: list[str] = field(default_factory=list)


def parse_audit(doc: dict[str, Any], report: str) -> Audited:
    """The auditor's JSON ({"clean": bool, "views": {name: {...}}}) as facts.

    `lost`, `duplicated` and `wrong` may be counts or lists of examples; either way
    the story shows how many.
    """
    if not isinstance(doc.get("views"), dict) or not isinstance(doc.get("clean"), bool):
        raise ValueError(f"{report}: not an audit report (needs 'clean' and 'views')")

    def count(value: Any) -> int:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, list | dict):
            return len(value)
        return 0

    views = [
        ViewAudit(
            name=name,
            exact=bool(v.get("exact", False)),
            expected=count(v.get("expected")),
            observed=count(v.get("observed")),
            lost=count(v.get("lost")),
            duplicated=count(v.get("duplicated")),
            wrong=count(v.get("wrong")),
        )
        for name, v in sorted(doc["views"].items())
        # A skipped view (its producer did not run: `pos-receipts` in a demo) compared
        # nothing; "0 of 0" would read as checked.
        if v.get("status") != "skipped"
    ]
    return Audited(bool(doc["clean"]), views, report)


def n(value: int) -> str:
    """Thousands with commas: 100,000."""
    return f"{value:,}"


def hm(t: datetime) -> str:
    return t.strftime("%H:%M")


def span(first: datetime, last: datetime) -> str:
    if first.date() == last.date():
        return f"{first:%Y-%m-%d} {hm(first)}-{hm(last)} UTC"
    return f"{first:%Y-%m-%d %H:%M} - {last:%Y-%m-%d %H:%M} UTC"


def _malformed(kinds: dict[str, int]) -> str:
    total = sum(kinds.values())
    parts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(kinds.items()))
    return f"{n(total)} malformed ({parts})" if parts else "0 malformed"


def audit_lines(audit: Audited) -> list[str]:
    exact = [v for v in audit.views if v.exact]
    lost = sum(v.lost for v in exact)
    dup = sum(v.duplicated for v in exact)
    wrong = sum(v.wrong for v in exact)
    head = (
        f"{'clean' if audit.clean else 'DISCREPANCIES'}: {len(exact)} exact view(s), "
        f"{n(lost)} lost, {n(dup)} duplicated, {n(wrong)} wrong ({audit.report})"
    )
    rows = [
        f"{v.name}: {n(v.observed)} of {n(v.expected)}"
        + ("" if v.exact else " (informational)")
        + (
            f"; lost {n(v.lost)}, duplicated {n(v.duplicated)}, wrong {n(v.wrong)}"
            if v.lost or v.duplicated or v.wrong
            else ""
        )
        for v in audit.views
    ]
    return [head, *rows]


def verdict(facts: DemoFacts) -> str:
    if facts.audit.clean:
        return (
            f"EXACT. {n(facts.produced.unique_receipts)} receipts went through "
            f"{n(facts.injected.total)} injected faults and every exact view holds each "
            "of them exactly once."
        )
    bad = [v.name for v in facts.audit.views if v.lost or v.duplicated or v.wrong]
    return (
        f"NOT EXACT: the auditor found discrepancies in {', '.join(bad) or 'the report'}; "
        f"see {facts.audit.report}."
    )


def _wrap(label: str, text: str) -> str:
    # Paths stay whole: never broken at a hyphen or inside a long word.
    return textwrap.fill(
        text,
        width=88,
        initial_indent=label,
        subsequent_indent=" " * len(label),
        break_long_words=False,
        break_on_hyphens=False,
    )


def render(facts: DemoFacts) -> str:
    """The story, one paragraph per layer, ~78 columns wide."""
    p, i, s, b, v = facts.produced, facts.injected, facts.speed, facts.batch, facts.served
    pad = " " * 11
    lines = [
        "The story of this run",
        "=====================",
        f"Produced   {n(p.unique_receipts)} unique receipts from {p.stores} stores "
        f"({p.devices} devices, {p.skewed_devices} with skewed clocks),",
        f"{pad}{span(p.first_happened, p.last_happened)}, as {n(p.messages)} messages "
        f"into {p.topic}.",
        f"{pad}The ground truth is in the ledger {p.ledger}.",
        f"Injected   {n(i.resends)} resends (same bytes again), {n(i.bursts)} same-second "
        f"bursts, {n(i.late)} late receipts",
        f"{pad}({n(i.beyond_bound)} later than the speed layer's {i.bound_hours:g} h bound), "
        f"{n(i.out_of_order)} out of order,",
        _wrap(pad, f"{_malformed(i.malformed)},"),
        f"{pad}{n(i.conflicts)} conflicting copies (same key, other items), "
        f"clock skew up to +-{i.clock_skew_max_s:g} s.",
        f"Speed      {s.micro_batches} micro-batch(es) in {s.seconds:.0f} s: {n(s.valid)} valid "
        f"messages, {n(s.invalid)} dead letters;",
        f"{pad}absorbed {n(s.resends_absorbed)} resends, counted {n(s.conflicts)} conflicts, "
        f"{n(s.late)} late receipts",
        f"{pad}updated their windows, {n(s.beyond_bound)} beyond its bound left to the "
        "batch layer.",
    ]
    if facts.alerts is not None:
        a = facts.alerts
        rules = ", ".join(f"{r} {n(c)}" for r, c in sorted(a.by_rule.items())) or "none"
        lines += [
            f"Alerts     {n(sum(a.by_rule.values()))} alerts in {a.seconds:.0f} s, each "
            f"committed once: {rules}."
        ]
    lines += [
        f"Batch      Airflow ran pos_batch ({b.dag_run_id}) over "
        f"[{b.interval_start:%Y-%m-%d %H:%M}, {hm(b.interval_end)}) UTC",
        f"{pad}(+{b.lookback_hours:g} h look-back) in {b.seconds:.0f} s: read "
        f"{n(b.input_rows)} master records, kept {n(b.receipts)} receipts,",
        f"{pad}removed {n(b.duplicates_removed)} duplicates ({n(b.conflicts)} of them "
        f"conflicts), took {n(b.beyond_speed_bound)} receipts the speed",
        f"{pad}layer left; fixed {n(b.windows_fixed)} window(s) of the speed view "
        f"({n(b.receipts_fixed)} receipts).",
        f"Serving    store {v.store} on {v.day}: {v.windows} windows, {n(v.receipts)} "
        f"receipts, revenue {v.revenue};",
        f"{pad}{v.from_batch} from batch, {v.from_speed} from speed, {v.final} final "
        f"(horizon {v.horizon:%Y-%m-%d %H:%M} UTC)."
        if v.horizon is not None
        else f"{pad}{v.from_batch} from batch, {v.from_speed} from speed, {v.final} final "
        "(no batch horizon yet).",
    ]
    audit = audit_lines(facts.audit)
    lines += [_wrap("Audit      ", audit[0]), *(f"{pad}{row}" for row in audit[1:])]
    lines += [_wrap("Verdict    ", verdict(facts))]
    lines += [f"Note       {note}" for note in facts.notes]
    lines += [f"Took       {facts.seconds / 60:.1f} min; logs in {facts.logs}"]
    return "\n".join(lines) + "\n"
