"""bench/speed_latency.py's poller against real Cassandra: it reads the store-days of one
day in one request (an IN on the partition key), so the rows of every watched store-day,
of whatever day, must come back, and nothing of a store-day it does not watch."""

from __future__ import annotations

import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.adapters.service import wait_for
from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:  # bench/ holds scripts that import each other by name
    sys.path.insert(0, str(BENCH))

from speed_latency import Poller  # noqa: E402

pytestmark = pytest.mark.integration

MONDAY, TUESDAY = date(2026, 3, 2), date(2026, 3, 3)
NINE = datetime(2026, 3, 2, 9, 0)
NINE_FIFTEEN = datetime(2026, 3, 2, 9, 15)
TUESDAY_TEN = datetime(2026, 3, 3, 10, 0)


def test_the_poller_sees_each_watched_store_day_of_every_day_and_no_other(
    isolated: tuple[Settings, Any],
) -> None:
    settings, cql = isolated
    insert = cql.prepare(
        f"INSERT INTO {tables.AGG_SPEED_TABLE} (operation_id, day, window_start, receipt_count) "
        "VALUES (?, ?, ?, ?)"
    )
    for row in [
        (1, MONDAY, NINE, 3),
        (1, MONDAY, NINE_FIFTEEN, 1),
        (2, MONDAY, NINE, 2),
        (3, TUESDAY, TUESDAY_TEN, 4),
        (4, MONDAY, NINE, 9),  # a store-day nobody watches
    ]:
        cql.execute(insert, row)

    poller = Poller(settings, settings.cassandra.keyspace, interval_s=0.05)
    try:
        poller.watch([(1, NINE.replace(tzinfo=UTC)), (2, NINE.replace(tzinfo=UTC))])
        poller.watch([(3, TUESDAY_TEN.replace(tzinfo=UTC))])
        expected = {
            (1, NINE.replace(tzinfo=UTC)): 3,
            (1, NINE_FIFTEEN.replace(tzinfo=UTC)): 1,  # the same store-day's other window
            (2, NINE.replace(tzinfo=UTC)): 2,
            (3, TUESDAY_TEN.replace(tzinfo=UTC)): 4,
        }
        assert wait_for(lambda: poller.counts == expected, timeout=30, interval=0.05), poller.counts
        # Every level up to the count was seen (each receipt of a window has its instant).
        assert sorted(poller.first_seen[(3, TUESDAY_TEN.replace(tzinfo=UTC))]) == [1, 2, 3, 4]
    finally:
        poller.close()
