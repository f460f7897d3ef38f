"""The README, CHANGELOG.md and docs/ stay true: the configuration table is the settings'
own, every link resolves to a file (and heading) inside the repository, and the README
stays short.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pos_lambda.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
CHANGELOG = PROJECT_ROOT / "CHANGELOG.md"
CONFIGURATION = PROJECT_ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
MAX_README_LINES = 340

# Links that leave the repository, allowed one by one when really needed (none so far):
# a page that needs an upstream document names it in words instead.
ALLOWED_EXTERNAL: frozenset[str] = frozenset()

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title"; no nested brackets needed.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def markdown_files() -> list[Path]:
    docs = sorted((PROJECT_ROOT / "docs").rglob("*.md"))
    return [README, CHANGELOG, *docs]


def prose(text: str) -> str:
    """The text without code blocks and code spans: links there are examples, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return [*INLINE_LINK.findall(body), *REFERENCE_DEF.findall(body)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_the_configuration_page_is_the_settings_own() -> None:
    text = CONFIGURATION.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{CONFIGURATION} needs {BEGIN}/{END}"
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POS_")}
    done = subprocess.run(
        [sys.executable, "-m", "pos_lambda.settings", "--markdown"],
        capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip("\n"), "python -m pos_lambda.settings --markdown printed nothing"
    assert block == done.stdout.strip("\n"), (
        "docs/configuration.md's settings table differs from "
        "`python -m pos_lambda.settings --markdown`: run `make docs`"
    )


def link_problems(page: Path, root: Path) -> list[str]:
    """What is wrong with each link of `page`: leaves `root`, names no file or heading."""
    problems = []
    for target in links(page.read_text()):
        if not target or target in ALLOWED_EXTERNAL:
            continue
        if SCHEME.match(target) or target.startswith("//"):
            problems.append(f"{target}: leaves the repository (name it in words instead)")
            continue
        path_part, _, anchor = target.partition("#")
        if path_part.startswith("/"):
            problems.append(f"{target}: an absolute path; link relative to {page.name}")
            continue
        file = (page.parent / path_part).resolve() if path_part else page.resolve()
        if not file.is_relative_to(root):
            problems.append(f"{target}: points outside the repository")
        elif not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{target}: no heading #{anchor} in {file.relative_to(root)}")
    return problems


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    root = PROJECT_ROOT.resolve()
    problems = link_problems(page, root)
    assert not problems, f"{page.relative_to(root)}:\n  " + "\n  ".join(problems)


def test_the_link_check_flags_what_it_must(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (tmp_path / "outside.md").write_text("# Out\n")
    (root / "docs" / "a.md").write_text("# A page\n\n## The merge: which view\n")
    page = root / "README.md"
    page.write_text(
        "[ok](docs/a.md#the-merge-which-view) [self](#top) [up](../outside.md)\n"
        "[gone](docs/b.md) [heading](docs/a.md#nowhere) [abs](/etc/hosts)\n"
        "[web](https://example.org/) [mail](mailto:a@b.c)\n\n# Top\n"
    )
    assert link_problems(page, root.resolve()) == [
        "../outside.md: points outside the repository",
        "docs/b.md: no such file",
        "docs/a.md#nowhere: no heading #nowhere in docs/a.md",
        "/etc/hosts: an absolute path; link relative to README.md",
        "https://example.org/: leaves the repository (name it in words instead)",
        "mailto:a@b.c: leaves the repository (name it in words instead)",
    ]


def test_the_link_check_sees_what_it_must() -> None:
    # Literal cases for the parser and the slugs the check relies on.
    text = (
        "See [a](docs/a.md#the-merge) and ![img](docs/x.png 'title').\n"
        "`[not](a link)` and\n```\n[nor](this.md)\n```\n[ref]: ../outside.md\n"
    )
    assert links(text) == ["docs/a.md#the-merge", "docs/x.png", "../outside.md"]
    assert slug("The merge: which view answers a window") == "the-merge-which-view-answers-a-window"
    assert slug("Airflow (the batch layer's scheduler)") == "airflow-the-batch-layers-scheduler"
    assert slug("`pos-batch`") == "pos-batch"
    assert slug("producer_clients") == "producer_clients"


def test_readme_stays_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < MAX_README_LINES, (
        f"README.md has {lines} lines (under {MAX_README_LINES}): move detail to docs/"
    )
