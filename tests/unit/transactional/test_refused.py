"""Which records' refused outputs become dead letters (pure: no Kafka)."""

from __future__ import annotations

import json

from pos_lambda.transactional.refused import RefusedOutputs, dead_letter
from pos_lambda.transactional.step import Output, Source


def at(partition: int, offset: int) -> Source:
    return Source(partition, offset, 0)


def test_a_refused_batch_only_makes_suspects_sent_alone_on_the_replay() -> None:
    refused = RefusedOutputs(patience_s=60)
    for offset in (10, 11, 12):  # one batch of three refused
        refused.note(at(0, offset), "MSG_SIZE_TOO_LARGE", now=5.0, alone=False)
    assert [refused.verdict(at(0, o), now=500.0)[0] for o in (9, 10, 11, 12, 13)] == [
        "send", "send_alone", "send_alone", "send_alone", "send",
    ]  # fmt: skip
    # Another partition is not concerned.
    assert refused.verdict(at(1, 10), now=500.0) == ("send", "")


def test_a_record_refused_alone_is_replayed_until_its_partition_was_blocked_for_the_patience() -> (
    None
):
    refused = RefusedOutputs(patience_s=60)
    refused.note(at(0, 10), "MSG_SIZE_TOO_LARGE", now=100.0, alone=False)
    refused.note(at(0, 11), "MSG_SIZE_TOO_LARGE", now=100.0, alone=False)
    refused.delivered(at(0, 10))  # innocent: went through alone
    refused.note(at(0, 11), "MSG_SIZE_TOO_LARGE: too large", now=101.0, alone=True)
    assert refused.verdict(at(0, 10), now=120.0) == ("send", "")
    assert refused.verdict(at(0, 11), now=159.9) == ("send_alone", "")
    # The patience counts from the partition's first refusal, not the record's own.
    assert refused.verdict(at(0, 11), now=160.0) == (
        "dead_letter",
        "MSG_SIZE_TOO_LARGE: too large (refused for 60 s)",
    )


def test_a_record_the_client_can_never_send_is_dead_lettered_at_once() -> None:
    refused = RefusedOutputs(patience_s=300)
    refused.note(at(2, 7), "MSG_SIZE_TOO_LARGE: local", now=1.0, alone=True, for_good=True)
    assert refused.verdict(at(2, 7), now=1.0) == ("dead_letter", "MSG_SIZE_TOO_LARGE: local")


def test_a_commit_forgets_what_it_passed_and_unblocks_the_partition() -> None:
    refused = RefusedOutputs(patience_s=60)
    refused.note(at(0, 10), "x", now=0.0, alone=True)
    refused.note(at(0, 20), "x", now=0.0, alone=False)
    refused.committed(0, 15)
    assert refused.verdict(at(0, 10), now=100.0) == ("send", "")
    assert refused.blocked_since == {0: 0.0}  # offset 20 is still in doubt
    refused.committed(0, 21)
    assert (refused.suspects, refused.confirmed, refused.blocked_since) == ({}, {}, {})
    # A new refusal starts a new patience.
    refused.note(at(0, 30), "x", now=500.0, alone=True)
    assert refused.verdict(at(0, 30), now=559.0) == ("send_alone", "")


def test_a_dead_letter_names_the_input_record_the_outputs_and_the_reason() -> None:
    letter = dead_letter(
        "receipts",
        "pos.transactions",
        "pos.receipts",
        at(3, 42),
        [Output(b"101:1001:7", b"x" * 6000)],
        "MSG_SIZE_TOO_LARGE: Broker: Message size too large (refused for 300 s)",
    )
    assert letter.key == b"pos.transactions:3:42"
    assert json.loads(letter.value) == {
        "processor": "receipts",
        "input": {"topic": "pos.transactions", "partition": 3, "offset": 42},
        "output_topic": "pos.receipts",
        "reason": "MSG_SIZE_TOO_LARGE: Broker: Message size too large (refused for 300 s)",
        "outputs": [{"key": "101:1001:7", "bytes": 6000}],
    }
    assert letter.headers == (
        ("pos.reason", b"MSG_SIZE_TOO_LARGE: Broker: Message size too large (refused for 300 s)"),
    )
