"""The driver's CQL session closes with its own query run, not a restarted one's (pure)."""

from __future__ import annotations

import uuid

from pyspark.sql.streaming.listener import QueryTerminatedEvent

from pos_lambda.speed_layer.listening import RunCloser


def test_only_the_runs_own_termination_closes_it() -> None:
    query_id, earlier_run, this_run = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    closed: list[bool] = []
    closer = RunCloser(str(this_run), lambda: closed.append(True))

    # The previous run of the same query (same id, restarted from its checkpoint), whose
    # termination Spark's listener bus may deliver after this run's listener is added.
    closer.onQueryTerminated(QueryTerminatedEvent(query_id, earlier_run, None, None))
    assert closed == []

    closer.onQueryTerminated(QueryTerminatedEvent(query_id, this_run, "boom", None))
    assert closed == [True]
