"""The deduplicated topic `pos.receipts`, exactly once under faults (as the alerts in
test_alerts_eos.py).

A known input (the simulator's receipts with resends, late, out-of-order and malformed
messages, plus conflicting copies sent after their originals, `pos_lambda_dev.demo.conflicts`)
flows into Kafka while `pos-receipts run` processes it in a separate process that is
killed -9 three times mid-transaction (twice by its crash point, with receipts on the
broker and the commit not yet made; once from outside), and the broker is hard-restarted
(kill -9, start) once while it runs. Then:

- the auditor's `receipts_topic` view (read_committed) finds every receipt of the
  producer's ledger once, with the ledger's content, and nothing else;
- each committed record is keyed by its natural key and carries its original message,
  byte for byte (from the messages the simulator produced, never from the processor);
- a read_uncommitted consumer also sees the aborted records: more records, the same keys.

The broker restart acts on the local Kafka every other test uses: run this file alone,
holding the machine's heavy-work lock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from pos_lambda.audit import audit
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda.settings import Settings
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from tests.integration.alerts_helpers import (
    faulty_stream,
    read_all,
    receipts_settings,
    through_faults,
)

# The broker restart would strike the tests running beside it: `make test` runs this
# file after its parallel part.
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def _originals(messages: list[OutgoingMessage]) -> dict[bytes, bytes]:
    """Record key -> the original message of each receipt (the simulator's, kind receipt)."""
    out = {}
    for m in messages:
        if m.kind == "receipt":
            doc = json.loads(m.value)
            key = f"{doc['operation_id']}:{doc['vendor_fiscal_module']}:{doc['transaction_id']}"
            out[key.encode()] = m.value
    return out


def test_every_receipt_exactly_once_after_kill_9_and_a_broker_hard_restart(
    settings: Settings, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    s = receipts_settings(
        settings, new_topic, receipts_transaction_max_ms=100, receipts_transaction_max_messages=50
    )
    result = faulty_stream(seed=62)
    with_conflicts = add_conflicts(result.messages, rate=0.03, seed=62)
    ledger = tmp_path / "ledger"
    summary = {
        **summary_with(result.summary, with_conflicts.faults),
        "topic": s.topics.transactions,
    }
    ledger_files.write(ledger, result.receipts, [*result.faults, *with_conflicts.faults], summary)
    kinds = Counter(m.kind.split(":")[0] for m in with_conflicts.messages)
    assert min(kinds["resend"], kinds["conflict"], kinds["malformed"]) >= 20, kinds
    log = tmp_path / "receipts.log"
    through_faults(s, log, "receipts", with_conflicts.messages)

    report = audit(s, ledger, ["receipts_topic"], progress=None)
    view = report.view("receipts_topic")
    assert report.clean, report.table()
    assert (view.tally.expected, view.tally.observed) == (len(result.receipts),) * 2
    committed = read_all(s.bootstrap_servers, s.topics.receipts, "read_committed")
    assert [k for k, n in Counter(r.key for r in committed).items() if n > 1] == []
    assert {r.key: r.value for r in committed} == _originals(result.messages)
    # The aborted transactions' records are in the log: read_uncommitted shows them, and
    # each is a receipt that was emitted again (same key) and committed later.
    uncommitted = read_all(s.bootstrap_servers, s.topics.receipts, "read_uncommitted")
    assert len(uncommitted) > len(committed)
    assert {r.key for r in uncommitted} == {r.key for r in committed}
    assert log.read_text().count("failpoint receipts.after_produce reached: kill -9") == 2
