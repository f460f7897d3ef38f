"""The consistency rule on a real replicated keyspace: a read that decides a write must
overlap that write (docs/consistency.md).

The speed layer reads before it writes: a micro-batch's winners are the receipts whose
natural keys `receipt_keys` does not hold yet, and a window's aggregate is its stored
row plus those winners. Here a replica misses the first micro-batch's writes (down, with
hinted handoff off, so that nothing repairs it on its return), and the second
micro-batch brings a resend and a new receipt of the same window:

- read at ONE from that replica alone, the speed layer takes the resend for a new
  receipt and builds on an empty window: the window ends with 2 receipts of 3;
- read at LOCAL_QUORUM (the default) with one good replica beside the stale one, it
  sees the stored key and the stored window: 3 receipts, as the producer sent.

Expected values are literal: the receipts are written out below.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import cluster
from tests.cluster.conftest import cql_session
from tests.integration.speed_helpers import (
    device_key,
    ms,
    pos_speed_to_end,
    produce_raw,
    receipt_json,
)

AT = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
WINDOW = datetime(2026, 3, 2, 9, 0)  # the 15-minute window, as the driver returns it
ONE_LEVEL_STORE, QUORUM_STORE = 41, 42
# Each receipt: one line, 2 x 1.90 = 3.80.
REVENUE = Decimal("3.80")


def _send(settings: Settings, store: int, tids: list[int]) -> None:
    produce_raw(
        settings,
        [receipt_json(store, 1, tid, AT) for tid in tids],
        timestamps=[ms(AT)] * len(tids),
        keys=[device_key(store, 1)] * len(tids),
    )


def _window(settings: Settings, store: int, level: str) -> tuple[int, Decimal]:
    session = cql_session(settings, level)
    try:
        row = session.execute(
            f"SELECT receipt_count, revenue FROM {tables.AGG_SPEED_TABLE} "
            "WHERE operation_id = %s AND day = %s AND window_start = %s",
            [store, WINDOW.date(), WINDOW],
        ).one()
    finally:
        session.cluster.shutdown()
    assert row is not None, f"store {store}: no window row"
    return row.receipt_count, Decimal(row.revenue)


def test_a_stale_replica_read_at_one_counts_a_resend_that_local_quorum_does_not(
    on_cluster: Settings, layout: cluster.Layout
) -> None:
    base = on_cluster  # the cluster's processes are managed through the same state dir
    node1, _, node3 = layout.hosts
    # Node 3 goes away, and nobody keeps hints for it: back, it holds nothing of batch 1.
    for n in (1, 2):
        cluster.nodetool(base, layout, n, "disablehandoff")
    try:
        cluster.cassandra_process(base, 3).stop(timeout=90)
        _send(on_cluster, ONE_LEVEL_STORE, [1, 2])
        _send(on_cluster, QUORUM_STORE, [1, 2])
        pos_speed_to_end(on_cluster)  # batch 1, at LOCAL_QUORUM on nodes 1 and 2

        cluster.start_cassandra_node(base, layout, 3)
        cluster.await_cassandra_ring(base, layout, [node3])

        # At the chosen level, one good replica beside the stale one is enough.
        cluster.cassandra_process(base, 2).stop(timeout=90)
        cluster.await_cassandra_ring(base, layout, [node1, node3])
        _send(on_cluster, QUORUM_STORE, [1, 3])  # a resend of receipt 1, and receipt 3
        pos_speed_to_end(on_cluster)

        # At ONE, with the stale replica the only one to answer.
        cluster.cassandra_process(base, 1).stop(timeout=90)
        _send(on_cluster, ONE_LEVEL_STORE, [1, 3])
        pos_speed_to_end(
            on_cluster.with_overrides(
                cassandra_read_consistency="ONE", cassandra_write_consistency="ONE"
            )
        )
    finally:
        cluster.up(base, layout)
        for n in (1, 2):
            cluster.nodetool(base, layout, n, "enablehandoff")

    # Every replica read (ALL, as the audit reads): the stored answer, whichever is newest.
    assert _window(on_cluster, QUORUM_STORE, "ALL") == (3, 3 * REVENUE)
    # Receipt 2 lost and receipt 1 counted again: 2 where the producer sent 3.
    assert _window(on_cluster, ONE_LEVEL_STORE, "ALL") == (2, 2 * REVENUE)
