"""The silence rule against the auditor's independent expectation, over simulated
weeks with every catalogue store (UTC+05:45, +05:30, both hemispheres' DST changes, a
24-hour store, closed days): the rule's alerts (pos_lambda.stores.store_time) equal the
ones the auditor counts minute by minute from the ledger (audit.expectations)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pos_lambda.alerts.processor import rules_from
from pos_lambda.alerts.rules import PartitionState, Source
from pos_lambda.audit import expectations as ex
from pos_lambda.audit.run import alert_rules
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.settings import load_settings


@pytest.mark.parametrize(
    "start",
    [
        # Bratislava and London fall back on 25 October, New York on 1 November.
        datetime(2026, 10, 23, 12, tzinfo=UTC),
        # Bratislava and London spring forward on 29 March, Adelaide falls back on 5 April.
        datetime(2026, 3, 27, tzinfo=UTC),
    ],
)
def test_the_rule_and_the_auditor_agree_across_dst_changes(start: datetime, tmp_path: Path) -> None:
    result = simulate(
        SimulationConfig(
            count=3000, seed=9, start=start, stores=7, mean_gap_s=120, store_hours=True,
            faults=FaultConfig(resend_rate=0.03, late_rate=0.02, late_max_delay_s=3600,
                               clock_skew_max_s=30),
        )
    )  # fmt: skip
    ledger_files.write(tmp_path, result.receipts, result.faults, result.summary)
    ledger = ex.load(tmp_path)
    settings = load_settings()
    expected, _ = ex.expected_alerts(ledger, alert_rules(settings, ledger))
    assert len(ex.ledger_store_weeks(ledger.summary)) == 7
    rules = rules_from(settings, result.stores)
    state, got = PartitionState(), Counter[tuple[str, int, int, int]]()
    for offset, message in enumerate(result.messages):  # one partition: each device's order
        for a in state.apply(rules, message.value, Source(0, offset, 0)):
            got[(a.rule, a.operation_id, a.vendor_fiscal_module, a.transaction_id)] += 1
    silent = sum(n for k, n in expected.items() if k[0] == "device_silent")
    assert silent > 500  # enough silences to disagree on, in every store's hours
    assert got == expected
