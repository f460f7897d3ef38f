"""The audit's result: one entry per view, its verdict, the table and the JSON (pure).

JSON (what `pos-audit --json PATH` writes; other tools read it, keep it stable):

    {"clean": bool, "ledger": str, "keyspace": str, "topic": str,
     "views": {name: {"exact": bool, "expected": n, "observed": n, "lost": n,
                      "duplicated": n, "wrong": n, "examples": [...],
                      "beyond_bound": n, "status": "checked" | "skipped",
                      "failed": bool, "note": str}}}

`exact`: discrepancies fail the audit. A speed view is not exact while the speed layer
has not read the ledger's topic to its end (its gaps are reported, not failed; rows
counted twice or wrong still fail). `beyond_bound`: ledger receipts the view leaves
out by design (later than the speed layer's lateness bound), not counted as lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pos_lambda.audit.compare import Tally


@dataclass
class ViewResult:
    name: str
    exact: bool
    tally: Tally = field(default_factory=Tally)
    beyond_bound: int = 0
    status: str = "checked"  # or "skipped": the view's producer never ran (see note)
    note: str = ""
    requested: bool = False  # named with --views: skipping it fails the audit

    @property
    def failed(self) -> bool:
        if self.status == "skipped":
            return self.requested
        t = self.tally
        # Outside its exactness (a lagging speed layer) a view may miss rows; it may
        # never hold a row twice or a wrong one.
        return bool(t.discrepancies if self.exact else t.duplicated + t.wrong)

    def to_json(self) -> dict[str, Any]:
        t = self.tally
        return {
            "exact": self.exact,
            "expected": t.expected,
            "observed": t.observed,
            "lost": t.lost,
            "duplicated": t.duplicated,
            "wrong": t.wrong,
            "examples": t.examples,
            "beyond_bound": self.beyond_bound,
            "status": self.status,
            "failed": self.failed,
            "note": self.note,
        }


@dataclass
class AuditReport:
    ledger: str
    keyspace: str
    topic: str
    views: list[ViewResult]

    @property
    def clean(self) -> bool:
        return not any(v.failed for v in self.views)

    @property
    def exit_code(self) -> int:
        return 0 if self.clean else 1

    def view(self, name: str) -> ViewResult:
        return next(v for v in self.views if v.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "ledger": self.ledger,
            "keyspace": self.keyspace,
            "topic": self.topic,
            "views": {v.name: v.to_json() for v in self.views},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    def table(self, examples: int = 3) -> str:
        head = ("view", "exact", "expected", "observed", "lost", "dup", "wrong", "beyond", "")
        rows = [head]
        for v in self.views:
            t = v.tally
            verdict = "FAIL" if v.failed else ("skipped" if v.status == "skipped" else "ok")
            if v.status == "checked" and not v.failed and t.discrepancies:
                verdict = "reported"  # gaps of a view that is not exact now
            rows.append(
                (v.name, "yes" if v.exact else "no", str(t.expected), str(t.observed),
                 str(t.lost), str(t.duplicated), str(t.wrong), str(v.beyond_bound), verdict)
            )  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                      enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows
        ]  # fmt: skip
        lines.insert(1, "-" * len(lines[0]))
        for v in self.views:
            if v.note:
                lines.append(f"{v.name}: {v.note}")
            if v.tally.discrepancies and examples:
                for e in v.tally.examples[:examples]:
                    lines.append(f"  {v.name} {e['kind']}: {json.dumps(e, default=str)}")
        verdict = "CLEAN: every exact view equals the ledger" if self.clean else (
            "DISCREPANCIES: " + ", ".join(v.name for v in self.views if v.failed)
        )  # fmt: skip
        lines.append(verdict)
        return "\n".join(lines)
