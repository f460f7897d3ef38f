"""Expected vs observed rows -> counts of lost, duplicated and wrong rows (pure).

Three shapes of view:

- keyed rows (raw receipts, receipt_keys): one row per key expected. lost: an expected
  key with no row; duplicated: every row beyond the first of a key; wrong: a key whose
  row differs from the expectation, or a key the ledger does not know.
- aggregates (15-minute windows): one row per window. lost: an expected window
  missing, or counting fewer receipts than expected (receipts lost from it);
  duplicated: a window counting more receipts than expected (a receipt counted twice);
  wrong: the right receipt count with another quantity, revenue or late count, or a
  window the ledger does not imply. Windows with no receipts on either side are equal.
- identities (alerts, conflicts): a multiset. lost: an expected identity not observed;
  duplicated: every observation beyond the expected number; wrong: an identity the
  ledger does not imply (counted once per identity, its repeats as duplicated).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar

from pos_lambda.audit.expectations import MalformedFact, reason_code
from pos_lambda.schemas.aggregate import NO_RECEIPTS, Aggregate

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MAX_EXAMPLES = 5


def plain(value: Any) -> Any:
    """JSON-friendly form of keys and rows (examples end up in the JSON report)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


@dataclass
class Tally:
    expected: int = 0
    observed: int = 0
    lost: int = 0
    duplicated: int = 0
    wrong: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def note(self, kind: str, key: Any, expected: Any = None, observed: Any = None) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < MAX_EXAMPLES:
            example = {"kind": kind, "key": plain(key)}
            if expected is not None:
                example["expected"] = plain(expected)
            if observed is not None:
                example["observed"] = plain(observed)
            self.examples.append(example)

    @property
    def discrepancies(self) -> int:
        return self.lost + self.duplicated + self.wrong


def keyed_rows(expected: Mapping[K, V], observed: Iterable[tuple[K, V]]) -> Tally:
    """Views that must hold one row per key (see the module docstring)."""
    seen: dict[K, V] = {}
    t = Tally(expected=len(expected))
    for key, row in observed:
        t.observed += 1
        if key in seen:
            t.note("duplicated", key, expected.get(key), row)
            continue
        seen[key] = row
        if key not in expected:
            t.note("wrong", key, None, row)
        elif row != expected[key]:
            t.note("wrong", key, expected[key], row)
    for key, want in expected.items():
        if key not in seen:
            t.note("lost", key, want, None)
    return t


def aggregate_rows(
    expected: Mapping[K, Aggregate], observed: Iterable[tuple[K, Aggregate]]
) -> Tally:
    """Aggregate views: one row per window (see the module docstring)."""
    got: dict[K, Aggregate] = {}
    t = Tally(expected=len(expected))
    for key, row in observed:
        row = Aggregate(*row)
        if row.receipt_count == 0 and row == NO_RECEIPTS:
            continue  # an empty window is no row (the serving merge fills them in)
        t.observed += 1
        if key in got:  # a window stored twice
            t.note("duplicated", key, expected.get(key), row)
            continue
        got[key] = row
    for key in sorted(set(expected) | set(got), key=repr):
        want, have = expected.get(key), got.get(key)
        if want is None:
            t.note("wrong", key, None, have)
        elif have is None or have.receipt_count < want.receipt_count:
            t.note("lost", key, want, have)
        elif have.receipt_count > want.receipt_count:
            t.note("duplicated", key, want, have)
        elif have != want:
            t.note("wrong", key, want, have)
    return t


def identities(expected: Counter[K], observed: Iterable[K]) -> Tally:
    """Multisets of identities (see the module docstring)."""
    got: Counter[K] = Counter(observed)
    t = Tally(expected=sum(expected.values()), observed=sum(got.values()))
    for key in sorted(set(expected) | set(got), key=repr):
        want, have = expected.get(key, 0), got.get(key, 0)
        if want == 0:
            t.note("wrong", key, None, have)
            for _ in range(have - 1):
                t.note("duplicated", key, 0, have)
            continue
        for _ in range(want - have):
            t.note("lost", key, want, have)
        for _ in range(have - want):
            t.note("duplicated", key, want, have)
    return t


def dead_letters(expected: list[MalformedFact], observed: Iterable[tuple[str, str]]) -> Tally:
    """Dead letters, (sha256 of raw value, reason), against the injected messages.

    With fingerprints in the ledger each message is found by its bytes: lost when no
    dead letter holds them, duplicated for every further one, wrong when its reason's
    code is not the one the kind must give (MALFORMED_REASONS / expected_reason) or the
    bytes are no injected message. Fingerprints are a multiset: two injected messages
    may have identical bytes (truncation cuts different receipts to the same prefix),
    and then two dead letters of those bytes are both expected. Older ledgers without
    fingerprints: reason codes are compared as multisets (lost: fewer of a code than
    injected; wrong: more).
    """
    rows = list(observed)
    t = Tally(expected=len(expected), observed=len(rows))
    if expected and all(m.value_sha256 for m in expected):
        want: dict[str, list[MalformedFact]] = {}
        for m in expected:
            want.setdefault(str(m.value_sha256), []).append(m)
        seen: Counter[str] = Counter()
        for sha, reason in rows:
            seen[sha] += 1
            facts = want.get(sha, [])
            if seen[sha] > max(len(facts), 1):
                t.note("duplicated", sha, facts[0].kind if facts else None, reason)
            elif not facts:
                t.note("wrong", sha, None, reason)
            elif not any(_gives(m, reason) for m in facts):
                m = facts[0]
                t.note("wrong", sha, m.expected_reason or sorted(m.codes), reason)
        for sha, facts in want.items():
            for _ in range(len(facts) - seen[sha]):
                m = facts[0]
                t.note("lost", sha, m.expected_reason or sorted(m.codes), None)
        return t
    want_codes: Counter[str] = Counter()
    for m in expected:
        want_codes[min(m.codes) if m.codes else f"?{m.kind}"] += 1
    have_codes = Counter(reason_code(reason) for _, reason in rows)
    for code in sorted(set(want_codes) | set(have_codes)):
        for _ in range(want_codes[code] - have_codes[code]):
            t.note("lost", code, want_codes[code], have_codes[code])
        for _ in range(have_codes[code] - want_codes[code]):
            t.note("wrong", code, want_codes[code], have_codes[code])
    return t


def _gives(m: MalformedFact, reason: str) -> bool:
    """Whether `reason` is the dead-letter reason injected message `m` must get."""
    return reason_code(reason) in m.codes and (not m.expected_reason or reason == m.expected_reason)
