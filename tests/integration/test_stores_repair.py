"""`pos-stores set --repair` rewrites a broken `stores` row on the real Cassandra.

A row edited by hand past pos-stores' validation (an overnight Monday) cannot be
changed field by field: `set` reads the row first, and the row does not read back. The
refusal says so and names the repair; `--repair` writes the whole row without reading
it, after which the serving layer and `pos-stores list` read it again.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from pos_lambda.serving import Serving
from pos_lambda.serving.errors import BrokenStore
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import VENV_BIN, env_for

pytestmark = pytest.mark.integration

OVERNIGHT = (
    "hours of mon: '22:00-02:00' closes before it opens: overnight hours are not "
    "supported, split them at midnight (fri=18:00-24:00 and sat=00:00-02:00)"
)


def _stores(s: Settings, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "pos-stores"), *argv],
        env=env_for(s),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_set_repair_rewrites_a_hand_broken_row(isolated: tuple[Settings, Any]) -> None:
    s, cql = isolated
    # Edited in cqlsh past pos-stores' validation, as test_alerts_store_hours.py does.
    cql.execute(
        "INSERT INTO stores (operation_id, name, time_zone, opening_hours) "
        "VALUES (555, 'Night owl', 'Europe/Bratislava', {'mon': '22:00-02:00'})"
    )
    with Serving(s) as serving, pytest.raises(BrokenStore) as refused:
        serving.store_entry(555)
    assert str(refused.value) == (
        f"the stores table's row of store 555 is broken ({OVERNIGHT}), so its local day is "
        "unknown: rewrite that row with pos-stores set 555 --repair --name ... --zone ... "
        "--hours ..., or ask by UTC day meanwhile"
    )

    # A change field by field reads the row first: refused, naming the repair.
    changed = _stores(s, "set", "555", "--hours", "mon=22:00-24:00")
    assert (changed.returncode, changed.stdout) == (5, ""), changed.stderr
    assert changed.stderr == (
        f"pos-stores set: the stores table's row of store 555 is broken ({OVERNIGHT}), so it "
        "cannot be changed field by field: rewrite it whole with pos-stores set 555 --repair "
        "--name ... --zone ... --hours ... (days not named are closed)\n"
    )

    repaired = _stores(s, "set", "555", "--repair", "--name", "Night owl",
                       "--zone", "Europe/Bratislava",
                       "--hours", "mon=22:00-24:00", "--hours", "tue=00:00-02:00")  # fmt: skip
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.splitlines() == [
        "repaired store 555 (its row rewritten whole):",
        "operation_id  name       time_zone          mon          tue          wed     thu"
        "     fri     sat     sun",
        "555           Night owl  Europe/Bratislava  22:00-24:00  00:00-02:00  closed  closed"
        "  closed  closed  closed",
    ]

    listed = _stores(s, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {
            "operation_id": 555,
            "name": "Night owl",
            "time_zone": "Europe/Bratislava",
            "opening_hours": {
                "mon": "22:00-24:00", "tue": "00:00-02:00", "wed": "closed", "thu": "closed",
                "fri": "closed", "sat": "closed", "sun": "closed",
            },
        }
    ]  # fmt: skip
    with Serving(s) as serving:
        assert serving.store_entry(555).opening_hours()["mon"] == "22:00-24:00"
