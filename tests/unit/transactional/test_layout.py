"""The partition layout rules (transactional/layout.py): pure, with literal values."""

from __future__ import annotations

import pytest

from pos_lambda.dedup import processor as dedup
from pos_lambda.settings import load_settings
from pos_lambda.transactional import processor as shell
from pos_lambda.transactional.layout import (
    History,
    belongs_to,
    home,
    processed_in_place,
    reads_for_rebuild,
)
from tests.support.memory_kafka import MemoryBroker
from tests.support.processor_harness import run_to_completion


def test_home_is_the_crc32_of_the_key_modulo_the_count() -> None:
    # zlib.crc32(b"101:1001") == 1123357034, as librdkafka's rd_crc32 computes it.
    assert home(b"101:1001", 2) == 0
    assert home(b"101:1001", 6) == 2
    assert home(None, 6) is None and home(b"", 6) is None


def test_a_history_travels_as_offset_metadata_and_back() -> None:
    history = History.starting(2).extended(1363, 6).extended(5000, 8)
    assert history.encode() == "pos.layout=2@0,6@1363,8@5000"
    assert History.decode("pos.layout=2@0,6@1363,8@5000", 8) == history
    assert [history.at(o) for o in (0, 1362, 1363, 4999, 5000, 9999)] == [2, 2, 6, 6, 8, 8]
    assert history.largest == 8 and history.current == 8


def test_a_commit_without_history_was_processed_under_todays_count() -> None:
    assert History.decode(None, 4) == History(((0, 4),))
    assert History.decode("", 4) == History(((0, 4),))
    assert History.decode("written by someone else", 4) == History(((0, 4),))


@pytest.mark.parametrize(
    "bad", ["pos.layout=", "pos.layout=2@5", "pos.layout=2@0,x", "pos.layout=6@9,2@0"]
)
def test_an_unreadable_history_is_an_error_not_a_guess(bad: str) -> None:
    with pytest.raises(ValueError, match="unreadable layout history"):
        History.decode(bad, 4)


def test_extending_at_the_same_count_or_at_offset_zero() -> None:
    two = History.starting(2)
    assert two.extended(100, 2) is two
    assert two.extended(0, 6) == History(((0, 6),))  # nothing was processed under 2
    assert History(((0, 2), (50, 6))).extended(50, 8) == History(((0, 2), (50, 8)))


def test_settled_from_is_where_the_last_run_of_a_count_starts() -> None:
    history = History(((0, 2), (100, 6)))
    assert history.settled_from(6) == 100
    assert history.settled_from(2) == -1  # not the current count: never settled
    assert History.starting(6).settled_from(6) == 0


def test_which_records_were_processed_in_place() -> None:
    history = History(((0, 2), (100, 6)))
    key = b"101:1001"  # home 0 of 2, 2 of 6
    assert processed_in_place(history, 0, 99, key, None, "receipts")
    assert not processed_in_place(history, 0, 100, key, None, "receipts")  # a stray under 6
    assert processed_in_place(history, 2, 100, key, "receipts", "receipts")  # its own forward
    assert not processed_in_place(history, 2, 100, key, "alerts", "receipts")  # another's
    assert processed_in_place(history, 1, 150, None, None, "receipts")  # no key: no home
    assert belongs_to(key, 0, 6, 2) and not belongs_to(key, 0, 6, 0)
    assert belongs_to(None, 3, 6, 3)


def test_a_rebuild_reads_other_partitions_only_below_where_they_settled() -> None:
    histories = {
        0: History(((0, 2), (40, 6))),  # processed under 2 below 40
        1: History.starting(2),  # not committed under 6 yet: all of it
        2: History.starting(6),  # a new partition: nothing of another's
    }
    committed = {0: 70, 1: 30, 2: 12}
    assert reads_for_rebuild({2}, 6, histories, committed) == [(0, 40), (1, 30), (2, 12)]
    assert reads_for_rebuild({0}, 6, histories, committed) == [(0, 70), (1, 30)]
    steady = {0: History.starting(6), 1: History.starting(6)}
    assert reads_for_rebuild({1}, 6, steady, {0: 500, 1: 80}) == [(1, 80)]


def test_a_topic_recreated_with_fewer_partitions_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The group committed under 4 partitions; the topic now has 2: exit 3, nothing written."""
    broker = MemoryBroker({"pos.transactions": 2, "pos.receipts": 1})
    broker.commit_offsets(
        "pos-receipts",
        {("pos.transactions", 0): 0, ("pos.transactions", 1): 0},
        {("pos.transactions", 0): "pos.layout=4@0", ("pos.transactions", 1): "pos.layout=4@0"},
    )
    broker.append("pos.transactions", 0, b"not json", key=b"101:1001")  # one to read
    s = load_settings()
    run = run_to_completion(broker, lambda c: dedup.processor(s, clients=c), restarts=0)
    assert run.exits == [f"exit {shell.EXIT_FATAL}", f"final: exit {shell.EXIT_FATAL}"]
    assert "has 2 partitions, but group pos-receipts processed it with 4" in caplog.text
    assert broker.read_committed("pos.receipts") == []
