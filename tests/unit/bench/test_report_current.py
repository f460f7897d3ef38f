"""docs/bench/README.md is what bench/report.py renders from the JSON beside it."""

from __future__ import annotations

from pathlib import Path

import report
import results

DOCS_BENCH = Path(__file__).resolve().parents[3] / "docs" / "bench"


def test_the_committed_report_is_rendered_from_the_committed_json() -> None:
    docs = [results.load(p) for p in sorted(DOCS_BENCH.glob("*.json"))]
    assert docs, f"no benchmark JSON in {DOCS_BENCH}"
    assert (DOCS_BENCH / "README.md").read_text() == report.render(docs), (
        "docs/bench/README.md is stale: run `make docs` (bench/report.py)"
    )
