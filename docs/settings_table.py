"""Write the settings table into docs/configuration.md, between its two markers.

    python docs/settings_table.py

`make docs` runs it. The table is the output of `python -m pos_lambda.settings
--markdown` (section, environment variable, default, description, from the settings'
own descriptions); tests/unit/test_readme.py fails when that copy differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"


def settings_markdown() -> str:
    # The defaults, not this shell's values: POS_* variables left out.
    env = {k: v for k, v in os.environ.items() if not k.startswith("POS_")}
    done = subprocess.run(
        [sys.executable, "-m", "pos_lambda.settings", "--markdown"],
        capture_output=True, text=True, env=env, cwd=ROOT, check=True,
    )  # fmt: skip
    return done.stdout.strip("\n")


def splice(text: str, table: str) -> str:
    """`text` with everything between the markers replaced by `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{README}: no {BEGIN} ... {END} block (in this order) to fill")
    return f"{text[: start + len(BEGIN)]}\n{table}\n{text[end:]}"


def main() -> int:
    text = README.read_text()
    new = splice(text, settings_markdown())
    if new != text:
        README.write_text(new)
    print(f"settings table: {README.name} {'updated' if new != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
