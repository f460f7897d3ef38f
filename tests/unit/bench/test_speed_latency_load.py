"""bench/speed_latency.py's load and warm-up rules (pure: no services)."""

from __future__ import annotations

import itertools

from bench.speed_latency import bodies, caught_up_after


def test_the_repeated_simulation_never_repeats_a_natural_key() -> None:
    planned = list(itertools.islice(bodies(seed=3, chunk=40), 120))  # three rounds
    keys = [
        (p.body["operation_id"], p.body["vendor_fiscal_module"], p.body["transaction_id"])
        for p in planned
    ]
    assert len(set(keys)) == 120
    first, third = planned[0], planned[80]
    assert third.body["transaction_id"] == first.body["transaction_id"] + 2 * 10**9
    assert {**third.body, "transaction_id": 0} == {**first.body, "transaction_id": 0}
    assert third.key == first.key and third.operation_id == first.operation_id


def test_the_archiver_has_caught_up_once_its_latest_micro_batch_left_nothing_behind() -> None:
    # batch id -> (start, records left behind in Kafka)
    draining = {0: (100.0, 0), 1: (180.0, 31_000), 2: (210.0, 12_000)}
    assert not caught_up_after(draining, 150.0)
    drained = {**draining, 3: (235.0, 0)}
    assert caught_up_after(drained, 150.0)
    # Only micro-batches started under the load count: batch 0 ran before it.
    assert not caught_up_after({0: (100.0, 0)}, 150.0)
    # Behind again after a drained one: the latest decides. Unknown lag (-1): not yet.
    assert not caught_up_after({**drained, 4: (260.0, 5)}, 150.0)
    assert not caught_up_after({3: (235.0, -1)}, 150.0)
