"""bench/ holds scripts, not a package: its modules import each other as top-level names
(`import results`), so the tests put bench/ on sys.path the same way running a script does."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
