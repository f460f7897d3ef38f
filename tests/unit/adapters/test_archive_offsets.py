"""The archiver's lag behind an instant, from Kafka offsets (pure parts)."""

from __future__ import annotations

from typing import Any

from pos_lambda.adapters.archive_offsets import ArchiveLag, end_offsets, lag


def test_a_kafka_sources_end_offset_is_read_for_its_topic_only() -> None:
    text = '{"pos.transactions": {"0": 12, "3": 7}, "other": {"0": 99}}'
    assert end_offsets(text, "pos.transactions") == {0: 12, 3: 7}
    assert end_offsets(text, "absent") == {}
    assert end_offsets(None, "pos.transactions") == {}
    # StreamingQuery.lastProgress has it parsed already.
    assert end_offsets({"pos.transactions": {"1": 5}}, "pos.transactions") == {1: 5}


def test_the_archiver_is_behind_by_the_records_before_the_instant_it_has_not_committed() -> None:
    result = lag(
        at_or_after={0: 40, 1: 10, 2: 5},
        log_end={0: 50, 1: 10, 2: 9},
        committed={0: 40, 1: 3, 2: None},
    )
    assert result.needed == {0: 40, 1: 10, 2: 5}
    assert result.behind == {1: 7, 2: 5}
    assert not result.done
    assert result.describe() == "12 records still to archive (partition 1: 7, partition 2: 5)"


def test_with_no_record_at_or_after_the_instant_the_whole_log_must_be_archived() -> None:
    # -1: Kafka has no record at or after the instant yet: every record came before it.
    result = lag(at_or_after={0: -1, 1: 4}, log_end={0: 25, 1: 9}, committed={0: 20, 1: 4})
    assert result.needed == {0: 25, 1: 4}
    assert result.behind == {0: 5}


def test_an_instant_before_every_record_needs_nothing_even_with_no_commit() -> None:
    result = lag(at_or_after={0: 0, 1: 0}, log_end={0: 8, 1: 3}, committed={})
    assert result.done
    assert result.behind == {}
    assert result.describe() == "the master dataset holds every record before the instant"


def test_an_archiver_ahead_of_the_instant_is_done() -> None:
    assert ArchiveLag(needed={0: 5}, committed={0: 9}).done


class _Wedged:
    """An admin client whose commits time out, as librdkafka's did after a broker's
    hard restart; or one that commits (recording what)."""

    def __init__(self, wedged: bool, sent: list[dict[int, int]]) -> None:
        self.wedged, self.sent = wedged, sent

    def alter_consumer_group_offsets(self, requests: list[Any]) -> dict[str, Any]:
        from concurrent.futures import Future, TimeoutError

        future: Future[None] = Future()
        if self.wedged:
            future.set_exception(TimeoutError())
        else:
            self.sent.append({tp.partition: tp.offset for tp in requests[0].topic_partitions})
            future.set_result(None)
        return {"pos-archiver": future}


def test_a_failed_commit_is_sent_again_by_a_fresh_client_even_with_no_new_micro_batch() -> None:
    from pos_lambda.adapters.archive_offsets import OffsetsCommitter
    from pos_lambda.settings import load_settings

    sent: list[dict[int, int]] = []
    clients = iter([_Wedged(True, sent), _Wedged(False, sent)])
    made: list[_Wedged] = []

    def admin() -> _Wedged:
        made.append(next(clients))
        return made[-1]

    committer = OffsetsCommitter(load_settings(), admin=admin)
    committer.commit({0: 747, 1: 1459})  # times out: a fresh client is made
    assert sent == [] and len(made) == 2
    committer.retry()  # the query's idle event: the same offsets, by the new client
    assert sent == [{0: 747, 1: 1459}]
    committer.retry()  # committed: nothing sent again
    committer.commit({0: 747, 1: 1459})
    assert sent == [{0: 747, 1: 1459}]
    committer.close()
    committer.commit({0: 800, 1: 1500})  # closed with its query: commits stop
    assert sent == [{0: 747, 1: 1459}]
