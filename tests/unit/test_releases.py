"""releases.json is well-formed, names the package's version as the newest release, and
every release has its CHANGELOG.md section with the same date and an `### Upgrading`."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib

import pytest

from pos_lambda.settings import PROJECT_ROOT
from pos_lambda_dev.releases import (
    CHANGELOG_FILE,
    PARTS,
    RELEASES_FILE,
    UNRELEASED,
    changelog_sections,
    previous_release,
    read_releases,
    release_problems,
)

FINGERPRINTS = {part: "0" * 64 for part in PARTS}


def test_releases_json_is_well_formed() -> None:
    assert release_problems(json.loads(RELEASES_FILE.read_text())) == []


def test_the_newest_release_is_the_version_both_packages_declare() -> None:
    newest = read_releases()[0].version
    for pyproject in (PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / "dev" / "pyproject.toml"):
        declared = tomllib.loads(pyproject.read_text())["project"]["version"]
        assert declared == newest, f"{pyproject.relative_to(PROJECT_ROOT)} says {declared}"


def test_every_release_has_its_changelog_section_in_the_same_order() -> None:
    releases = read_releases()
    sections = changelog_sections(CHANGELOG_FILE.read_text())
    assert [s.version for s in sections] == [r.version for r in releases]
    for release, section in zip(releases, sections, strict=True):
        assert section.date == ("Unreleased" if release.date == UNRELEASED else release.date)
        assert section.subsection("Upgrading"), f"[{release.version}] has no ### Upgrading"


def test_an_upgrade_starts_from_the_previous_release_commit() -> None:
    previous = previous_release(read_releases())
    assert previous is not None and previous.released


def test_each_release_commit_was_committed_on_its_recorded_date() -> None:
    git = shutil.which("git")
    if git is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for release in read_releases():
        if release.commit is None:
            continue
        done = subprocess.run(
            [git, "log", "-1", "--format=%cs", release.commit],
            capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=30,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"{release.commit} is not in this clone (shallow?)")
        assert done.stdout.strip() == release.date, release.version


def test_the_well_formedness_check_flags_what_it_must() -> None:
    def entry(version: str, commit: str | None, date: str) -> dict[str, object]:
        return {"version": version, "commit": commit, "date": date, "fingerprints": FINGERPRINTS}

    good_commit = "8325b9075fbcb2538aa6989077aa29ba8e95cefd"
    assert release_problems({"releases": [entry("0.2.0", None, UNRELEASED)]}) == []
    assert release_problems([]) == [
        'the document must be an object with a list "releases", newest first'
    ]
    assert release_problems(
        {
            "releases": [
                entry("0.1.0", good_commit, "2026-11-29"),
                entry("0.2", None, UNRELEASED),
                entry("0.0.9", "8325b90", "29.11.2026"),
                {**entry("0.0.8", good_commit, "2026-11-01"), "fingerprints": {"cql_schema": "x"}},
            ]
        }
    ) == [
        "releases[1]: version '0.2' is not MAJOR.MINOR.PATCH",
        "releases[1]: only the newest release may be unreleased",
        "releases[2]: commit '8325b90' is not a full 40-hex-digit hash",
        f"releases[3]: fingerprints must name exactly {sorted(PARTS)}",
    ]
    assert release_problems(
        {"releases": [entry("0.1.0", good_commit, "2026-11-29"), entry("0.2.0", None, "")]}
    ) == [
        "releases[1]: no commit, so its date must be 'unreleased'",
        "releases[1]: only the newest release may be unreleased",
        "versions must be listed newest first, each once",
    ]


def test_changelog_sections_and_subsections_are_read_as_written() -> None:
    text = (
        "# Changelog\n\n## [0.2.0] - Unreleased\n\n### Fixed\n\n- a\n\n### Upgrading\n\n1. b\n\n"
        "## [0.1.0] - 2026-11-29\n\n### Added\n\n- c\n"
    )
    sections = changelog_sections(text)
    assert [(s.version, s.date) for s in sections] == [
        ("0.2.0", "Unreleased"),
        ("0.1.0", "2026-11-29"),
    ]
    assert sections[0].subsection("Upgrading") == "\n\n1. b\n\n"
    assert sections[0].subsection("Fixed") == "\n\n- a\n\n"
    assert sections[1].subsection("Upgrading") is None
