"""The compatibility rule: a change that can break a running deployment's checkpoint,
state or schema fails here until its fingerprint is recorded in releases.json and the
current version's `### Upgrading` in CHANGELOG.md names it with its migration
(docs/upgrading.md, "The rule the tests enforce"). Pure: the Spark StructTypes are built
and serialised by pyspark.sql.types, without a JVM."""

from __future__ import annotations

import pytest

from pos_lambda.schemas import contract, cql
from pos_lambda.settings import TopicSettings
from pos_lambda_dev import releases
from pos_lambda_dev.releases import (
    CHANGELOG_FILE,
    PARTS,
    changed_parts,
    changelog_problems,
    changelog_sections,
    fingerprint_problems,
    fingerprints,
    previous_release,
    read_releases,
)

RECORDED = {part: f"{i:064x}" for i, part in enumerate(PARTS)}


def test_this_tree_has_the_fingerprints_recorded_for_the_current_version() -> None:
    current = read_releases()[0]
    problems = fingerprint_problems(current.version, current.fingerprints, fingerprints())
    assert not problems, "\n\n".join(problems)


def test_the_changelog_names_every_part_changed_since_the_previous_release() -> None:
    all_releases = read_releases()
    current, previous = all_releases[0], previous_release(all_releases)
    if previous is None:
        pytest.skip("the first release has nothing to be compatible with")
    section = next(
        s for s in changelog_sections(CHANGELOG_FILE.read_text()) if s.version == current.version
    )
    changed = changed_parts(current.fingerprints, previous.fingerprints)
    problems = changelog_problems(current.version, changed, section.subsection("Upgrading"))
    assert not problems, "\n\n".join(problems)


def test_a_changed_fingerprint_fails_the_rule_and_says_what_to_do() -> None:
    computed = {**RECORDED, "cql_schema": "f" * 64}
    problems = fingerprint_problems("0.2.0", RECORDED, computed)
    assert len(problems) == 1
    assert problems[0].startswith("`cql_schema` (the Cassandra types, tables and indexes")
    for words in (
        "can break a running deployment's checkpoint, state or schema",
        "python -m pos_lambda_dev.releases record",
        "`### Upgrading` of `## [0.2.0]` in CHANGELOG.md that names `cql_schema`",
    ):
        assert words in problems[0]
    assert fingerprint_problems("0.2.0", RECORDED, RECORDED) == []


def test_a_changed_part_the_changelog_does_not_name_fails_the_rule() -> None:
    current = {**RECORDED, "kafka_topics": "e" * 64, "consumer_groups": "d" * 64}
    changed = changed_parts(current, RECORDED)
    assert changed == ["consumer_groups", "kafka_topics"]
    upgrading = "\n1. `make schema`.\n2. Recreate the topics: `kafka_topics` changed.\n"
    problems = changelog_problems("0.3.0", changed, upgrading)
    assert len(problems) == 1
    assert problems[0].startswith(
        "CHANGELOG.md: `### Upgrading` of `## [0.3.0]` does not name `consumer_groups`"
    )
    assert changelog_problems("0.3.0", changed, upgrading + "`consumer_groups` too\n") == []
    assert changelog_problems("0.3.0", [], None) == [
        "CHANGELOG.md: `## [0.3.0]` has no `### Upgrading`"
    ]


def test_a_new_table_changes_the_schema_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprints()
    table_ddl = cql.table_ddl
    monkeypatch.setattr(
        cql,
        "table_ddl",
        lambda ks: [*table_ddl(ks), f"CREATE TABLE IF NOT EXISTS {ks}.t (k int PRIMARY KEY)"],
    )
    after = fingerprints()
    assert changed_parts(after, before) == ["cql_schema"]


def test_a_renamed_topic_changes_the_topics_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprints()
    field = TopicSettings.model_fields["receipts"]
    monkeypatch.setattr(field, "default", "pos.receipts.v2")
    assert changed_parts(fingerprints(), before) == ["kafka_topics"]


def test_a_changed_contract_field_changes_both_contract_fingerprints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = fingerprints()
    wider = contract.FieldSpec("operation_id", contract.ID64, "The store.")
    fields = tuple(wider if f.name == "operation_id" else f for f in contract.SCALAR_FIELDS)
    monkeypatch.setattr(contract, "SCALAR_FIELDS", fields)
    assert changed_parts(fingerprints(), before) == [
        "contract_json_schema",
        "contract_spark_schemas",
        "cql_schema",
    ]


def test_a_description_alone_changes_no_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = fingerprints()
    reworded = tuple(
        contract.FieldSpec(f.name, f.kind, f.doc + " Reworded.", f.column)
        for f in contract.SCALAR_FIELDS
    )
    monkeypatch.setattr(contract, "SCALAR_FIELDS", reworded)
    assert fingerprints() == before


def test_every_part_is_computed() -> None:
    values = releases.part_values()
    assert list(values) == list(PARTS)
    assert values["kafka_topics"] == {
        "transactions": "pos.transactions",
        "dead_letters": "pos.dead_letters",
        "alerts": "pos.alerts",
        "receipts": "pos.receipts",
    }
    assert values["kafka_keys_and_headers"]["pos.receipts key"] == "101:1001:42"
    assert values["consumer_groups"] == {
        "pos-alerts run": "pos-alerts",
        "pos-alerts sink": "pos-alerts-sink",
        "pos-receipts run": "pos-receipts",
    }
