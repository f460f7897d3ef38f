"""The releases (releases.json) and the compatibility rule the tests enforce.

`releases.json`, at the repository's root, records every release, newest first: its
version (semantic versioning), its commit (null until released), its date ("unreleased"
until then) and the fingerprints (sha256) of the parts a running deployment's
checkpoints, state and schema depend on (`PARTS`). The newest entry is the current
version, the one pyproject.toml names; an upgrade test starts from the previous entry's
commit.

The rule (tests/unit/test_compatibility.py): the fingerprints recorded for the current
version are this tree's, and every part whose fingerprint differs from the previous
release's is named under the current version's `### Upgrading` in CHANGELOG.md, beside
the migration an operator runs. A change to one of these parts therefore fails the tests
until its author records it and says what the upgrade needs.

    python -m pos_lambda_dev.releases fingerprints     # this tree's, as JSON
    python -m pos_lambda_dev.releases record           # write them under the current version
    python -m pos_lambda_dev.releases previous-commit  # the commit an upgrade starts from
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pos_lambda.settings import PROJECT_ROOT

RELEASES_FILE = PROJECT_ROOT / "releases.json"
CHANGELOG_FILE = PROJECT_ROOT / "CHANGELOG.md"
UNRELEASED = "unreleased"
SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")

# What each fingerprinted part covers; its name is what CHANGELOG.md's Upgrading names.
PARTS: dict[str, str] = {
    "cql_schema": "the Cassandra types, tables and indexes `make schema` applies",
    "contract_json_schema": "the receipt contract's JSON Schema (descriptions aside)",
    "contract_spark_schemas": "the contract's Spark StructTypes (raw message, validated receipt)",
    "kafka_topics": "the default names of the pipeline's Kafka topics",
    "kafka_keys_and_headers": "the record keys of pos.receipts and pos.alerts, and their headers",
    "consumer_groups": "the transactional processors' and the alerts sink's consumer groups",
}

# The keyspace's name and replication are a deployment's settings, not the release's:
# the tables are rendered into one fixed name.
FINGERPRINT_KEYSPACE = "pos"
# A receipt's natural key and content hash whose output record keys are fingerprinted.
SAMPLE_NATURAL_KEY = (101, 1001, 42)
SAMPLE_CONTENT_HASH = "0" * 64


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None  # None until released
    date: str  # ISO date, or UNRELEASED
    fingerprints: dict[str, str]

    @property
    def released(self) -> bool:
        return self.commit is not None


class ReleasesError(ValueError):
    """releases.json is not what this module expects; the message lists every problem."""


def version_tuple(version: str) -> tuple[int, int, int]:
    match = SEMVER.match(version)
    if match is None:
        raise ReleasesError(f"{version!r} is not a semantic version MAJOR.MINOR.PATCH")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def release_problems(document: Any) -> list[str]:
    """What is wrong with a parsed releases.json (empty when well-formed)."""
    if not isinstance(document, dict) or not isinstance(document.get("releases"), list):
        return ['the document must be an object with a list "releases", newest first']
    entries = document["releases"]
    if not entries:
        return ["no release recorded"]
    problems: list[str] = []
    versions: list[tuple[int, int, int]] = []
    for i, entry in enumerate(entries):
        where = f"releases[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not an object")
            continue
        extra = set(entry) - {"version", "commit", "date", "fingerprints"}
        if extra:
            problems.append(f"{where}: unknown keys {sorted(extra)}")
        version, commit, date = entry.get("version"), entry.get("commit"), entry.get("date")
        if not isinstance(version, str) or not SEMVER.match(version):
            problems.append(f"{where}: version {version!r} is not MAJOR.MINOR.PATCH")
        else:
            versions.append(version_tuple(version))
        if commit is None:
            if date != UNRELEASED:
                problems.append(f"{where}: no commit, so its date must be {UNRELEASED!r}")
            if i != 0:
                problems.append(f"{where}: only the newest release may be unreleased")
        elif not isinstance(commit, str) or not COMMIT.match(commit):
            problems.append(f"{where}: commit {commit!r} is not a full 40-hex-digit hash")
        elif not isinstance(date, str) or not ISO_DATE.match(date):
            problems.append(f"{where}: date {date!r} is not YYYY-MM-DD")
        fingerprints = entry.get("fingerprints")
        if not isinstance(fingerprints, dict) or set(fingerprints) != set(PARTS):
            problems.append(f"{where}: fingerprints must name exactly {sorted(PARTS)}")
        elif not all(isinstance(v, str) and SHA256.match(v) for v in fingerprints.values()):
            problems.append(f"{where}: every fingerprint is a sha256 in hex")
    if versions != sorted(versions, reverse=True) or len(set(versions)) != len(versions):
        problems.append("versions must be listed newest first, each once")
    return problems


def read_releases(path: Path = RELEASES_FILE) -> list[Release]:
    """The releases, newest first; raises ReleasesError when the file is malformed."""
    document = json.loads(path.read_text())
    problems = release_problems(document)
    if problems:
        raise ReleasesError(f"{path}: " + "; ".join(problems))
    return [
        Release(e["version"], e["commit"], e["date"], dict(e["fingerprints"]))
        for e in document["releases"]
    ]


def previous_release(releases: Sequence[Release]) -> Release | None:
    """The release before the current one: what an upgrade to the current one starts from."""
    return releases[1] if len(releases) > 1 else None


# ---- CHANGELOG.md --------------------------------------------------------------------

_VERSION_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>.+?)[ \t]*$", re.MULTILINE)
_SUBHEADING = re.compile(r"^### (?P<title>.+?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class ChangelogSection:
    version: str
    date: str  # as the heading writes it: YYYY-MM-DD or "Unreleased"
    body: str

    def subsection(self, title: str) -> str | None:
        """The text under `### <title>` up to the next `###`, or None without one."""
        headings = list(_SUBHEADING.finditer(self.body))
        for i, heading in enumerate(headings):
            if heading["title"] == title:
                end = headings[i + 1].start() if i + 1 < len(headings) else len(self.body)
                return self.body[heading.end() : end]
        return None


def changelog_sections(text: str) -> list[ChangelogSection]:
    """The `## [version] - date` sections of a Keep a Changelog file, in file order."""
    headings = list(_VERSION_HEADING.finditer(text))
    sections = []
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        sections.append(
            ChangelogSection(heading["version"], heading["date"], text[heading.end() : end])
        )
    return sections


# ---- the fingerprints ----------------------------------------------------------------


def _without_descriptions(node: Any) -> Any:
    """A JSON Schema without its prose: a description documents, it validates nothing.
    Only string values go, so a contract field named `description` stays."""
    if isinstance(node, dict):
        return {
            k: _without_descriptions(v)
            for k, v in node.items()
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def _cql_schema() -> Any:
    from pos_lambda.schemas import cql

    # Layout (line breaks, indentation) is not schema.
    return [" ".join(statement.split()) for statement in cql.table_ddl(FINGERPRINT_KEYSPACE)]


def _contract_json_schema() -> Any:
    from pos_lambda.schemas import contract

    return _without_descriptions(contract.json_schema())


def _contract_spark_schemas() -> Any:
    # pyspark.sql.types builds and serialises a StructType without a JVM.
    from pos_lambda.schemas import contract

    return {
        "message": json.loads(contract.spark_message_schema().json()),
        "receipt": json.loads(contract.spark_receipt_schema().json()),
    }


def _string_defaults(section: Any) -> dict[str, Any]:
    """A settings section's string defaults, read from the class: the environment of the
    process computing a fingerprint must not change it."""
    return {
        name: field.default
        for name, field in section.model_fields.items()
        if isinstance(field.default, str)
    }


def _kafka_topics() -> Any:
    from pos_lambda.settings import TopicSettings

    return _string_defaults(TopicSettings)


def _kafka_keys_and_headers() -> Any:
    from pos_lambda.alerts import rules
    from pos_lambda.dedup import step
    from pos_lambda.transactional import layout

    return {
        # What the processors write into pos.transactions and its group's offset commits.
        "pos.transactions forward headers": [layout.FORWARDED_BY, layout.FORWARDED_FROM],
        "processor offset metadata": layout.History.starting(2).extended(10, 6).encode(),
        "pos.receipts key": step.record_key(SAMPLE_NATURAL_KEY).decode(),
        "pos.receipts headers": [step.SOURCE_HEADER, step.HASH_HEADER],
        # As the rules call it: only a conflict's id carries the conflicting content.
        "pos.alerts keys": {
            rule: rules.alert_id(
                rule, SAMPLE_NATURAL_KEY, SAMPLE_CONTENT_HASH if rule == "conflict" else ""
            )
            for rule in rules.RULES
        },
    }


def _consumer_groups() -> Any:
    from pos_lambda.settings import AlertsSettings, ReceiptsSettings

    alerts, receipts = AlertsSettings.model_fields, ReceiptsSettings.model_fields
    return {
        "pos-alerts run": alerts["group_id"].default,
        "pos-alerts sink": alerts["sink_group_id"].default,
        "pos-receipts run": receipts["group_id"].default,
    }


_PART_VALUES: dict[str, Callable[[], Any]] = {
    "cql_schema": _cql_schema,
    "contract_json_schema": _contract_json_schema,
    "contract_spark_schemas": _contract_spark_schemas,
    "kafka_topics": _kafka_topics,
    "kafka_keys_and_headers": _kafka_keys_and_headers,
    "consumer_groups": _consumer_groups,
}


def fingerprint(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def part_values() -> dict[str, Any]:
    """What each part is in this tree, as JSON values (what `fingerprints` hashes)."""
    return {part: _PART_VALUES[part]() for part in PARTS}


def fingerprints() -> dict[str, str]:
    return {part: fingerprint(value) for part, value in part_values().items()}


# ---- the rule ------------------------------------------------------------------------

_CONSEQUENCE = (
    "This change can break a running deployment's checkpoint, state or schema. Record the "
    "new fingerprint (`python -m pos_lambda_dev.releases record`) AND add an entry under "
    "`### Upgrading` of `## [{version}]` in CHANGELOG.md that names `{part}` and the "
    "migration an operator runs (docs/upgrading.md says which changes need one)."
)


def fingerprint_problems(
    version: str, recorded: Mapping[str, str], computed: Mapping[str, str]
) -> list[str]:
    """Each part whose fingerprint in this tree is not the one recorded for `version`."""
    return [
        f"`{part}` ({PARTS.get(part, 'an unknown part')}) differs from the fingerprint "
        f"recorded for {version} in releases.json (recorded {recorded.get(part)}, now "
        f"{computed.get(part)}). " + _CONSEQUENCE.format(version=version, part=part)
        for part in sorted(set(recorded) | set(computed))
        if recorded.get(part) != computed.get(part)
    ]


def changed_parts(current: Mapping[str, str], previous: Mapping[str, str]) -> list[str]:
    """The parts recorded for both releases whose fingerprints differ."""
    return sorted(p for p in set(current) & set(previous) if current[p] != previous[p])


def changelog_problems(version: str, changed: Sequence[str], upgrading: str | None) -> list[str]:
    """Each changed part that the version's `### Upgrading` text does not name."""
    if upgrading is None:
        return [f"CHANGELOG.md: `## [{version}]` has no `### Upgrading`"]
    return [
        f"CHANGELOG.md: `### Upgrading` of `## [{version}]` does not name `{part}`, whose "
        "fingerprint differs from the previous release's. "
        + _CONSEQUENCE.format(version=version, part=part)
        for part in changed
        if f"`{part}`" not in upgrading
    ]


# ---- command line --------------------------------------------------------------------


def _record(path: Path = RELEASES_FILE) -> None:
    document = json.loads(path.read_text())
    document["releases"][0]["fingerprints"] = fingerprints()
    path.write_text(json.dumps(document, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["fingerprints"]:
        print(json.dumps(fingerprints(), indent=2, sort_keys=True))
    elif args == ["record"]:
        _record()
        print(f"recorded this tree's fingerprints under {read_releases()[0].version}")
    elif args == ["previous-commit"]:
        previous = previous_release(read_releases())
        if previous is None or previous.commit is None:
            print("releases.json: no previous release to start from", file=sys.stderr)
            return 1
        print(previous.commit)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
