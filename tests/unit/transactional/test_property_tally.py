"""The exactly-once properties' tally at the end of the session, under pytest-xdist too
(tests/support/property_tally.py): the workers' tallies reach the controller and add up;
a fault schedule two workers both ran counts once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.memory_kafka import Fault
from tests.support.property_tally import Tally

ROOT = Path(__file__).resolve().parents[3]


def test_tallies_add_up_and_a_schedule_seen_twice_counts_once() -> None:
    a, b = Tally(), Tally()
    crash = (Fault("producer.commit_transaction", 1, "crash"),)
    a.record("receipts[crash]", crash, struck=1)
    a.record("receipts[crash]", (), struck=0)
    b.record("receipts[crash]", crash, struck=0)
    b.failed["receipts[crash]"] += 1
    b.record("alerts[fenced]", (Fault("producer.send_offsets_to_transaction", 2, "fenced"),), 1)
    total = Tally()
    total.add(a.to_json())
    total.add(b.to_json())
    assert total.lines() == [
        "alerts[fenced]: 1 examples, 1 distinct fault schedules, 1 of 1 faults struck, "
        "0 failing examples",
        "receipts[crash]: 3 examples, 2 distinct fault schedules, 1 of 2 faults struck, "
        "1 failing examples",
    ]
    assert total.total() == "in all: 4 examples, 3 distinct fault schedules, 1 failing examples"


def test_the_summary_adds_up_the_workers_tallies_under_xdist() -> None:
    """Both workers run the same property (`--dist each`): twice its 20 examples, the same
    fixed (derandomized) schedules."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}  # fmt: skip
    done = subprocess.run(
        # The plugins this file needs only: Schemathesis' and anyio's imports cost 1 s each.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:schemathesis",
         "-p", "no:anyio", "-n", "2", "--dist", "each",
         "tests/unit/transactional/test_exactly_once_properties.py",
         "-k", "test_alerts_exactly_once and timed_out"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "exactly-once properties: examples and fault schedules run" in done.stdout
    line = re.search(r"^alerts\[timed_out\]: (\d+) examples, (\d+) distinct", done.stdout, re.M)
    assert line, done.stdout[-3000:]
    examples, distinct = map(int, line.groups())
    assert examples == 2 * 20, done.stdout[-3000:]
    assert 1 < distinct <= 20, done.stdout[-3000:]
    assert f"in all: {examples} examples, {distinct} distinct fault schedules" in done.stdout
