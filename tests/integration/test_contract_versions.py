"""Two contract versions in one stream (issue 73): a roll-out of terminals sends messages
of the contract with a new optional field beside messages without it.

The evolution rule (src/pos_lambda/schemas/README.md): within v1 only optional fields
may be added, and a consumer ignores fields it does not know. Half of a faulty stream's
messages come from "newer" terminals that add a top-level `currency` and a per-line
`vat_rate`; a resend may come once from each kind of terminal (different bytes, the same
receipt). Then the speed views and the batch views equal the producer's
ledger: both versions counted, a mixed pair of copies is one receipt (a resend, not a
conflict), and only the malformed messages are dead-lettered.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.batch_layer import job
from pos_lambda.batch_layer.interval import Interval
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import (
    assert_views_match_ledger,
    expected_aggregates,
    plan,
    run_available_now,
    send,
)
from tests.integration.test_batch_layer import served_aggregates

pytestmark = pytest.mark.integration

ALL_DAYS = Interval(datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 14, tzinfo=UTC))


def newer_terminal(value: bytes) -> bytes:
    """The message as a terminal of the next contract revision sends it."""
    doc = json.loads(value)
    doc["currency"] = "EUR"
    for line in doc["transactions"]:
        line["vat_rate"] = "0.20"
    return json.dumps(doc, separators=(",", ":")).encode()


def test_old_and_new_contract_versions_in_one_stream_are_both_counted(
    spark: Any, isolated: tuple[Settings, Any], tmp_path: Path
) -> None:
    settings, cql = isolated
    ledger = tmp_path / "ledger"
    messages = plan(ledger, count=600, seed=731)
    mixed = [
        dataclasses.replace(m, value=newer_terminal(m.value))
        if i % 2 and m.kind in ("receipt", "resend")
        else m
        for i, m in enumerate(messages)
    ]
    newer = sum(b"vat_rate" in m.value for m in mixed)
    resends = [m for m in mixed if m.kind == "resend"]
    assert newer >= 250 and any(b"vat_rate" in m.value for m in resends), newer
    send(settings, mixed)

    run_available_now(spark, settings)
    assert_views_match_ledger(cql, ledger)
    malformed = ledger_files.load_summary(ledger)["faults"]["malformed"]
    dead = cql.execute(f"SELECT reason FROM {tables.DEAD_LETTERS_TABLE}").all()
    assert len(dead) == malformed, [r.reason for r in dead]
    conflicts = cql.execute(f"SELECT * FROM {tables.CONFLICTS_TABLE}").all()
    assert conflicts == []  # a receipt sent by both kinds of terminal is a resend

    job.run(spark, settings, ALL_DAYS)
    assert served_aggregates(cql) == expected_aggregates(ledger)
