"""Receipt status: the pure classification on literal rows, `look_up` over a recording
fake of its `ReceiptViews` port, and the front doors (HTTP, CLI) over the views in memory
(tests/support/memory_views.py), no Cassandra.

Store 1, device 7, receipt 42, happened 2026-03-02 09:03 UTC; its first copy at Kafka
partition 2 offset 10.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from pos_lambda.schemas.contract import LineItem
from pos_lambda.serving import Serving, cli
from pos_lambda.serving.errors import QueryError
from pos_lambda.serving.http import create_app
from pos_lambda.serving.model import DayVersion
from pos_lambda.serving.receipt_status import (
    ConflictingCopy,
    Content,
    DeadLetter,
    IndexedReceipt,
    KafkaCopy,
    ReceiptKey,
    classify,
    look_up,
)
from pos_lambda.serving.views import Views
from pos_lambda.settings import Settings
from tests.support.memory_views import MemoryKeyspace, memory_views

KEY = ReceiptKey(1, 7, 42)
DAY = date(2026, 3, 2)
HAPPENED = datetime(2026, 3, 2, 9, 3, tzinfo=UTC)
FIRST = KafkaCopy(2, 10, datetime(2026, 3, 2, 9, 3, 5, tzinfo=UTC))
AGAIN = KafkaCopy(2, 14, datetime(2026, 3, 2, 9, 4, 5, tzinfo=UTC))
INDEXED = IndexedReceipt(HAPPENED, DAY, FIRST, late=False, beyond_bound=False, last_resend=None)
ESPRESSO = [LineItem("Espresso", Decimal("1.90"), 2)]
WATER = [LineItem("Water", Decimal("1.00"), 3)]
CONFLICT = ConflictingCopy(
    differs=["line_items"],
    copy=Content(HAPPENED, WATER, 3, Decimal("3.00"), KafkaCopy(2, 12, None)),
    winner=Content(HAPPENED, ESPRESSO, 2, Decimal("3.80"), FIRST),
)


def dead(store: int | None, device: int | None, tid: int | None, offset: int) -> DeadLetter:
    return DeadLetter(
        store, device, tid, "pos.transactions", KafkaCopy(2, offset, None), "invalid_json", None
    )


def test_a_receipt_the_index_holds_once_is_accepted_with_its_winners_coordinates() -> None:
    answer = classify(KEY, INDEXED, [], [])
    assert (answer.status, answer.winner, answer.first_seen_at) == (
        "accepted",
        FIRST,
        FIRST.timestamp,
    )
    assert (answer.happened_at, answer.day, answer.late, answer.in_speed_view) == (
        HAPPENED, DAY, False, True,
    )  # fmt: skip
    assert answer.detail == "receipt 42 of device 7 in store 1 is accepted (partition 2 offset 10)"


def test_a_receipt_received_again_with_the_same_content_is_a_resend_absorbed() -> None:
    resent = IndexedReceipt(HAPPENED, DAY, FIRST, False, False, last_resend=AGAIN)
    answer = classify(KEY, resent, [], [])
    assert (answer.status, answer.winner, answer.last_resend) == ("resend_absorbed", FIRST, AGAIN)


def test_a_conflict_outranks_a_resend_and_carries_both_contents() -> None:
    resent = IndexedReceipt(HAPPENED, DAY, FIRST, False, False, last_resend=AGAIN)
    answer = classify(KEY, resent, [CONFLICT], [])
    assert answer.status == "conflict"
    [c] = answer.conflicts
    assert (c.copy.line_items, c.winner.line_items, c.differs) == (WATER, ESPRESSO, ["line_items"])
    assert answer.last_resend == AGAIN  # still said
    assert "a copy with other content came too" in answer.detail


def test_a_refused_record_of_the_key_without_a_valid_copy_is_a_dead_letter() -> None:
    # The index finds dead letters by receipt number: other stores' and devices' too.
    found = [dead(1, 7, 42, 11), dead(1, 8, 42, 3), dead(9, 7, 42, 4), dead(None, None, 42, 5)]
    answer = classify(KEY, None, [], found)
    assert answer.status == "dead_letter"
    assert answer.dead_letters == [dead(1, 7, 42, 11)]
    assert answer.winner is None
    assert answer.detail == (
        "receipt 42 of device 7 in store 1 was refused (invalid_json): resend a corrected copy"
    )


def test_a_valid_copy_outranks_a_dead_letter_which_still_comes_along() -> None:
    answer = classify(KEY, INDEXED, [], [dead(1, 7, 42, 9)])
    assert (answer.status, answer.dead_letters) == ("accepted", [dead(1, 7, 42, 9)])


def test_nothing_of_the_key_is_unknown() -> None:
    answer = classify(KEY, None, [], [dead(1, 8, 42, 3)])
    assert (answer.status, answer.winner, answer.dead_letters) == ("unknown", None, [])
    assert (
        answer.detail
        == "receipt 42 of device 7 in store 1 is unknown: no view holds it (resend it)"
    )


# Receipt 42 as the batch layer's index holds it: more than 48 h late, beyond the speed
# layer's lateness bound, so the speed layer kept no row of it.
LATE_DAY = date(2026, 2, 27)
LATE_HAPPENED = datetime(2026, 2, 27, 8, 0, tzinfo=UTC)
BATCH_ONLY = IndexedReceipt(LATE_HAPPENED, LATE_DAY, FIRST, late=True, beyond_bound=True,
                            last_resend=None)  # fmt: skip


def test_a_receipt_only_the_batch_index_holds_is_accepted_with_the_batch_as_source() -> None:
    answer = classify(KEY, None, [], [], batch=BATCH_ONLY)
    assert (answer.status, answer.source, answer.known_by) == ("accepted", "batch", ["batch"])
    assert (answer.winner, answer.happened_at, answer.day, answer.late, answer.in_speed_view) == (
        FIRST, LATE_HAPPENED, LATE_DAY, True, False,
    )  # fmt: skip
    assert answer.detail == (
        "receipt 42 of device 7 in store 1 is accepted "
        "(partition 2 offset 10, known to the batch layer only)"
    )


def test_a_receipt_both_layers_hold_takes_the_batch_row_and_the_speed_layers_resend() -> None:
    resent = IndexedReceipt(HAPPENED, DAY, FIRST, False, False, last_resend=AGAIN)
    batch = IndexedReceipt(HAPPENED, DAY, FIRST, False, False, last_resend=None)
    answer = classify(KEY, resent, [], [], batch=batch)
    assert (answer.status, answer.source, answer.known_by, answer.last_resend) == (
        "resend_absorbed", "batch", ["speed", "batch"], AGAIN,
    )  # fmt: skip
    assert answer.detail.startswith("receipt 42 of device 7 in store 1 is accepted (partition 2 "
                                    "offset 10) and")  # fmt: skip


def test_the_speed_layers_row_alone_is_the_source_and_nothing_is_no_layers() -> None:
    assert (classify(KEY, INDEXED, [], []).source, classify(KEY, INDEXED, [], []).known_by) == (
        "speed", ["speed"],
    )  # fmt: skip
    unknown = classify(KEY, None, [], [])
    assert (unknown.status, unknown.source, unknown.known_by) == ("unknown", None, [])


@dataclass
class FakeViews:
    """The `ReceiptViews` port in memory; records what it was asked."""

    indexed: dict[ReceiptKey, IndexedReceipt] = field(default_factory=dict)
    conflicts: dict[tuple[ReceiptKey, date], list[ConflictingCopy]] = field(default_factory=dict)
    dead: list[DeadLetter] = field(default_factory=list)
    batch: dict[ReceiptKey, IndexedReceipt] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        self.asked.append("index")
        return self.indexed.get(key)

    def batch_indexed_receipt(self, key: ReceiptKey) -> IndexedReceipt | None:
        self.asked.append("batch index")
        return self.batch.get(key)

    def conflicting_copies(self, key: ReceiptKey, winner_day: date) -> list[ConflictingCopy]:
        self.asked.append(f"conflicts {winner_day}")
        return self.conflicts.get((key, winner_day), [])

    def dead_letters_of(self, key: ReceiptKey, limit: int) -> list[DeadLetter]:
        self.asked.append(f"dead letters {key.operation_id}/{key.vendor_fiscal_module}/"
                          f"{key.transaction_id} limit {limit}")  # fmt: skip
        ident = (key.operation_id, key.vendor_fiscal_module, key.transaction_id)
        own = [d for d in self.dead
               if (d.operation_id, d.vendor_fiscal_module, d.transaction_id) == ident]  # fmt: skip
        return own[:limit]


def test_look_up_reads_conflicts_by_the_winners_day_only_for_an_indexed_receipt() -> None:
    views = FakeViews({KEY: INDEXED}, {(KEY, DAY): [CONFLICT]})
    assert look_up(KEY, views).status == "conflict"
    assert views.asked == [
        "index", "batch index", f"conflicts {DAY}", "dead letters 1/7/42 limit 101",
    ]  # fmt: skip

    other = FakeViews(dead=[dead(1, 7, 43, 1)])
    assert look_up(ReceiptKey(1, 7, 43), other).status == "dead_letter"
    assert other.asked == ["index", "batch index", "dead letters 1/7/43 limit 101"]


def test_look_up_reads_conflicts_by_the_batch_rows_day_for_a_receipt_only_it_holds() -> None:
    views = FakeViews(batch={KEY: BATCH_ONLY}, conflicts={(KEY, LATE_DAY): [CONFLICT]})
    answer = look_up(KEY, views)
    assert (answer.status, answer.source, answer.known_by) == ("conflict", "batch", ["batch"])
    assert views.asked == [
        "index", "batch index", f"conflicts {LATE_DAY}", "dead letters 1/7/42 limit 101",
    ]  # fmt: skip


def test_the_dead_letters_read_are_capped_and_the_answer_says_so() -> None:
    # A producer sent receipt 43 malformed 5 times; the answer reads at most 3.
    views = FakeViews(dead=[dead(1, 7, 43, n) for n in range(5)])
    answer = look_up(ReceiptKey(1, 7, 43), views, limit=3)
    assert views.asked == ["index", "batch index", "dead letters 1/7/43 limit 4"]
    assert (answer.status, [d.kafka.offset for d in answer.dead_letters]) == (
        "dead_letter", [0, 1, 2],
    )  # fmt: skip
    assert answer.dead_letters_note == (
        "more than 3 dead letters claim receipt 43 of device 7 in store 1: the first 3 read "
        "are shown (the dead_letters table has them all)"
    )
    exactly = look_up(ReceiptKey(1, 7, 43), FakeViews(dead=[dead(1, 7, 43, n) for n in range(3)]),
                      limit=3)  # fmt: skip
    assert (len(exactly.dead_letters), exactly.dead_letters_note) == (3, None)


@pytest.fixture
def serving(tmp_path: Path) -> Serving:
    """The library over the views in memory: receipt 42 indexed, receipt 43 a dead letter."""
    keyspace = MemoryKeyspace()
    keyspace.indexed(KEY, INDEXED)
    keyspace.dead_letters([dead(1, 7, 43, 1)])
    return Serving(Settings(state_dir=tmp_path), views=memory_views(keyspace))


GEN = "gen-b"  # the generation the batch pointer serves
LATE_KEY = ReceiptKey(1, 7, 45)


@pytest.fixture
def both_layers(tmp_path: Path) -> tuple[Serving, MemoryKeyspace]:
    """The views in memory with a committed batch (generation gen-b): receipt 42 in both
    indexes, receipt 45 in the batch's only, receipt 46 in an old generation's only."""
    keyspace = MemoryKeyspace()
    keyspace.day_version(DayVersion(LATE_DAY, "v1", datetime(2026, 3, 1, tzinfo=UTC), GEN, 9))
    keyspace.indexed(KEY, INDEXED)
    keyspace.batch_indexed(KEY, INDEXED, GEN)
    keyspace.batch_indexed(LATE_KEY, BATCH_ONLY, GEN)
    keyspace.batch_indexed(ReceiptKey(1, 7, 46), BATCH_ONLY, "gen-a")  # rebuilt away
    return Serving(Settings(state_dir=tmp_path), views=memory_views(keyspace)), keyspace


def test_the_views_answer_from_the_served_generations_batch_index(
    both_layers: tuple[Serving, MemoryKeyspace],
) -> None:
    serving, keyspace = both_layers
    late = serving.receipt_status(1, 7, 45)
    assert (late.status, late.source, late.known_by, late.winner, late.day) == (
        "accepted", "batch", ["batch"], FIRST, LATE_DAY,
    )  # fmt: skip
    both = serving.receipt_status(1, 7, 42)
    assert (both.status, both.source, both.known_by) == ("accepted", "batch", ["speed", "batch"])
    # A row of a generation no longer served does not count: that index is being replaced.
    assert serving.receipt_status(1, 7, 46).status == "unknown"
    # One read of the pointer's static generation, then one row by full primary key.
    assert keyspace.reads_of("receipt_key_batch") == [
        (GEN, 1, 7, 0, 45), (GEN, 1, 7, 0, 42), (GEN, 1, 7, 0, 46),
    ]  # fmt: skip


def test_before_any_batch_commit_the_batch_index_is_not_read(serving: Serving) -> None:
    assert serving.receipt_status(1, 7, 42).known_by == ["speed"]
    views = serving.views
    assert isinstance(views, Views) and isinstance(views.statements, MemoryKeyspace)
    assert views.statements.reads_of("receipt_key_batch") == []


def test_http_answers_source_and_known_by_beside_the_old_fields(
    both_layers: tuple[Serving, MemoryKeyspace],
) -> None:
    serving, _ = both_layers
    with TestClient(create_app(serving.settings, serving)) as http:
        body = http.get("/stores/1/devices/7/receipts/45").json()
        schema = http.get("/openapi.json").json()["components"]["schemas"]["ReceiptStatus"]
    assert (body["status"], body["source"], body["known_by"], body["in_speed_view"]) == (
        "accepted", "batch", ["batch"], False,
    )  # fmt: skip
    # Added, nothing renamed or made required: older clients read the answer as before.
    assert {"source", "known_by", "winner", "in_speed_view", "last_resend"} <= set(
        schema["properties"]
    )
    assert not {"source", "known_by"} & set(schema.get("required", []))


def test_http_answers_a_status_and_404_with_a_body_for_unknown(serving: Serving) -> None:
    with TestClient(create_app(serving.settings, serving)) as http:
        ok = http.get("/stores/1/devices/7/receipts/42")
        assert (ok.status_code, ok.json()["status"], ok.json()["winner"]) == (
            200, "accepted", {"partition": 2, "offset": 10, "timestamp": "2026-03-02T09:03:05Z"},
        )  # fmt: skip
        assert http.get("/stores/1/devices/7/receipts/43").json()["status"] == "dead_letter"
        unknown = http.get("/stores/1/devices/7/receipts/44")
        assert unknown.status_code == 404
        assert (unknown.json()["status"], unknown.json()["detail"]) == (
            "unknown", "receipt 44 of device 7 in store 1 is unknown: no view holds it (resend it)",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/stores/1/devices/seven/receipts/42", "device: Input should be a valid integer"),
        ("/stores/1/devices/7/receipts/4.2", "transaction: Input should be a valid integer"),
        ("/stores/-1/devices/7/receipts/42", "store: Input should be greater than or equal to 0"),
        ("/stores/1/devices/-7/receipts/42", "device: Input should be greater than or equal to 0"),
        ("/stores/1/devices/7/receipts/-42", "transaction: Input should be greater than or equal"),
        ("/stores/1/devices/2147483648/receipts/42", "device: Input should be less than or equal"),
        (f"/stores/1/devices/7/receipts/{2**63}", "transaction: Input should be less than or"),
    ],
)
def test_http_refuses_bad_path_values_with_422(serving: Serving, path: str, says: str) -> None:
    with TestClient(create_app(serving.settings, serving)) as http:
        r = http.get(path)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(says), r.json()


def test_the_library_refuses_out_of_range_keys(serving: Serving) -> None:
    with pytest.raises(QueryError, match="transaction -1 is out of range"):
        serving.receipt_status(1, 7, -1)
    with pytest.raises(QueryError, match="device 2147483648 is out of range"):
        serving.receipt_status(1, 2**31, 1)


def test_cli_renders_the_answer_and_takes_json_as_the_format(serving: Serving) -> None:
    args = cli._parser().parse_args(
        ["receipt", "--store", "1", "--device", "7", "--transaction", "42"]
    )
    _, render = cli._query(args, serving)
    assert render().startswith(
        "accepted: receipt 42 of device 7 in store 1 is accepted (partition 2 offset 10)\n"
        "winner: partition 2 offset 10, first seen 2026-03-02 09:03:05+00:00"
    )
    as_json = cli._parser().parse_args(["receipt", "--store", "1", "--device", "7",
                                        "--transaction", "44", "--json"])  # fmt: skip
    assert as_json.format == "json"


def test_cli_exits_3_on_unknown_with_the_answer_on_stdout(
    serving: Serving, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("pos_lambda.serving.service.Serving", lambda settings: serving)
    ask = ["receipt", "--store", "1", "--device", "7", "--transaction"]
    assert cli.main([*ask, "44", "--json"]) == cli.EXIT_UNKNOWN_RECEIPT == 3
    assert json.loads(capsys.readouterr().out)["status"] == "unknown"
    assert cli.main([*ask, "42"]) == 0
    assert capsys.readouterr().out.startswith("accepted: receipt 42 of device 7 in store 1")
    assert cli.main([*ask, "-1"]) == cli.EXIT_BAD_INPUT
    assert "transaction -1 is out of range" in capsys.readouterr().err


def test_cli_says_which_layer_knows_the_receipt(
    both_layers: tuple[Serving, MemoryKeyspace],
) -> None:
    serving, _ = both_layers
    args = cli._parser().parse_args(
        ["receipt", "--store", "1", "--device", "7", "--transaction", "45"]
    )
    _, render = cli._query(args, serving)
    assert "\nknown by: batch (answered from the batch layer's index)" in render()
