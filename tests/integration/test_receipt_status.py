"""Receipt status on the real layers: a POS terminal's retry loop against the HTTP API.

A terminal (store 301, device 7) lost its link while sending receipts 1-6. What made it
to Kafka: receipt 1; receipt 2 twice, byte for byte (a retry); receipt 3 and a copy with
other line items (a bug in the retry path); receipt 4 without its line items (refused).
Receipts 5 and 6 never left the terminal. The speed layer runs; then the terminal asks
"did you get receipt X?" for each receipt in its outbox and resends only those the
pipeline answers `unknown` (404). After the next speed run, every receipt it resent is
accepted, exactly once.

Expected values are literals of the messages sent here, and the Kafka coordinates and
timestamps the broker reported when it acknowledged each record (the terminal's own
delivery reports), never values computed by the code under test.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pos_lambda.serving import cookbook
from pos_lambda.serving.http import create_app
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import VENV_BIN, device_key, env_for, run_available_now

pytestmark = pytest.mark.integration

STORE, DEVICE = 301, 7
ESPRESSO = [{"title": "Espresso", "price": "1.90", "amount": 2}]  # 3.80
WATER = [{"title": "Water", "price": "1.00", "amount": 3}]  # 3.00


def message(tid: int, items: list[dict[str, Any]] | None = ESPRESSO) -> bytes:
    body: dict[str, Any] = {
        "happened_at": f"2026-03-02T09:0{tid}:00+00:00",
        "operation_id": STORE,
        "transaction_id": tid,
        "vendor_fiscal_module": DEVICE,
    }
    if items is not None:
        body["transactions"] = items
    return json.dumps(body).encode()


def sent_at(tid: int, copy: int = 0) -> datetime:
    """The record timestamp of a copy: 5 s after the receipt happened, 1 min per retry."""
    return datetime(2026, 3, 2, 9, tid + copy, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Delivered:
    partition: int
    offset: int
    timestamp: datetime


class Terminal:
    """The POS device's sending side: an idempotent producer keyed by device, which
    remembers where the broker put each record it acknowledged."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        self.topic = settings.topics.transactions
        self.producer = Producer(
            {"bootstrap.servers": settings.bootstrap_servers, "enable.idempotence": True}
        )
        self.sent: list[tuple[int, Delivered]] = []  # (transaction_id, where)

    def send(self, tid: int, value: bytes, at: datetime) -> None:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            ts = datetime.fromtimestamp(msg.timestamp()[1] / 1000, UTC)
            self.sent.append((tid, Delivered(msg.partition(), msg.offset(), ts)))

        self.producer.produce(
            self.topic,
            value=value,
            key=device_key(STORE, DEVICE),
            timestamp=int(at.timestamp() * 1000),
            on_delivery=delivered,
        )
        assert self.producer.flush(30) == 0  # one at a time: the terminal's own order

    def copies(self, tid: int) -> list[Delivered]:
        return [d for t, d in self.sent if t == tid]


def values_for(settings: Settings, tid: int) -> dict[str, Any]:
    return {
        **cookbook.EXAMPLE,
        "keyspace": settings.cassandra.keyspace,
        "store": STORE,
        "device": DEVICE,
        "transaction": tid,
    }


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _kafka(d: Delivered) -> dict[str, Any]:
    return {"partition": d.partition, "offset": d.offset, "timestamp": _iso(d.timestamp)}


def test_a_terminal_resends_only_what_the_pipeline_answers_unknown(
    isolated: tuple[Settings, Any], spark: Any
) -> None:
    settings, cql = isolated
    terminal = Terminal(settings)
    # What reached Kafka before the link dropped (receipts 5 and 6 did not).
    terminal.send(1, message(1), sent_at(1))
    terminal.send(2, message(2), sent_at(2))
    terminal.send(2, message(2), sent_at(2, copy=1))  # a retry: same bytes
    terminal.send(3, message(3), sent_at(3))
    terminal.send(3, message(3, WATER), sent_at(3, copy=1))  # other content
    terminal.send(4, message(4, items=None), sent_at(4))  # no line items: refused
    run_available_now(spark, settings)

    outbox = [1, 2, 3, 4, 5, 6]
    with TestClient(create_app(settings)) as http:

        def ask(tid: int) -> tuple[int, dict[str, Any]]:
            r = http.get(f"/stores/{STORE}/devices/{DEVICE}/receipts/{tid}")
            return r.status_code, r.json()

        first = {tid: ask(tid) for tid in outbox}
        # The terminal's retry loop: resend exactly what the pipeline does not know.
        resent = [tid for tid, (code, body) in first.items() if body["status"] == "unknown"]
        for tid in resent:
            assert first[tid][0] == 404
            terminal.send(tid, message(tid), sent_at(tid, copy=2))
        assert resent == [5, 6]

        [one] = terminal.copies(1)
        code, body = first[1]
        assert (code, body["status"], body["winner"], body["first_seen_at"]) == (
            200, "accepted", _kafka(one), _iso(sent_at(1)),
        )  # fmt: skip
        assert (body["happened_at"], body["day"], body["late"], body["in_speed_view"]) == (
            "2026-03-02T09:01:00Z", "2026-03-02", False, True,
        )  # fmt: skip
        assert (body["last_resend"], body["conflicts"], body["dead_letters"]) == (None, [], [])

        two, two_again = terminal.copies(2)
        code, body = first[2]
        assert (code, body["status"], body["winner"], body["last_resend"]) == (
            200, "resend_absorbed", _kafka(two), _kafka(two_again),
        )  # fmt: skip

        three, three_other = terminal.copies(3)
        code, body = first[3]
        assert (code, body["status"], body["winner"]) == (200, "conflict", _kafka(three))
        [conflict] = body["conflicts"]
        assert conflict["differs"] == ["line_items"]
        assert conflict["copy"]["kafka"] == _kafka(three_other)
        assert conflict["winner"]["kafka"] == _kafka(three)
        assert [i["title"] for i in conflict["copy"]["line_items"]] == ["Water"]
        assert [i["title"] for i in conflict["winner"]["line_items"]] == ["Espresso"]
        assert Decimal(conflict["copy"]["revenue"]) == Decimal("3.00")
        assert Decimal(conflict["winner"]["revenue"]) == Decimal("3.80")

        [four] = terminal.copies(4)
        code, body = first[4]
        assert (code, body["status"]) == (200, "dead_letter")
        [dead] = body["dead_letters"]
        assert (dead["reason"], dead["kafka"], dead["kafka_topic"]) == (
            "missing_field:transactions", _kafka(four), settings.topics.transactions,
        )  # fmt: skip

        assert (first[5][0], first[5][1]["status"]) == (404, "unknown")
        assert "receipt 5 of device 7 in store 301 is unknown" in first[5][1]["detail"]

        # The next speed run takes the resent receipts in; the terminal asks again.
        run_available_now(spark, settings)
        second = {tid: ask(tid) for tid in outbox}
        for tid in (5, 6):
            [copy] = terminal.copies(tid)
            assert (second[tid][0], second[tid][1]["status"], second[tid][1]["winner"]) == (
                200, "accepted", _kafka(copy),
            )  # fmt: skip
        assert {t: (c, b["status"]) for t, (c, b) in second.items() if t < 5} == {
            1: (200, "accepted"), 2: (200, "resend_absorbed"), 3: (200, "conflict"),
            4: (200, "dead_letter"),
        }  # fmt: skip

    # Each receipt is in the views once: 1, 2, 3, 5 and 6 (4 was never valid).
    raw = cql.execute("SELECT transaction_id FROM receipts_by_store_day").all()
    assert sorted(r.transaction_id for r in raw) == [1, 2, 3, 5, 6]
    # Nothing else was sent: 6 records before the drop, the 2 resends after.
    assert len(terminal.sent) == 8

    # The cookbook's CQL for it reads the same index row.
    [statement] = [
        sql
        for recipe, sql in zip(
            cookbook.RECIPES, cookbook.statements(values_for(settings, 2)), strict=True
        )
        if recipe.title.startswith("receipt status")
    ]
    row = cql.execute(statement).one()
    assert (row.kafka_offset, row.resent_kafka_offset) == (two.offset, two_again.offset)

    # The CLI says the same (its JSON is the HTTP API's), and exits 3 on unknown.
    done = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "receipt", "--store", str(STORE), "--device",
         str(DEVICE), "--transaction", "2", "--json"],
        env=env_for(settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "resend_absorbed"
    unknown = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "receipt", "--store", str(STORE), "--device",
         str(DEVICE), "--transaction", "7"],
        env=env_for(settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert unknown.returncode == 3, unknown.stderr
    assert unknown.stdout.startswith("unknown: receipt 7 of device 7 in store 301 is unknown")


def _archive_only(spark: Any, settings: Settings) -> None:
    """The archiver over everything in the topic now (Kafka -> the Delta master dataset),
    without the speed views job: the records reach the batch layer and no speed view."""
    from pos_lambda.speed_layer import archiver_job

    q = archiver_job.start(spark, settings, available_now=True)
    q.awaitTermination()
    assert q.exception() is None, q.exception()


def test_a_receipt_only_the_batch_knows_is_accepted_with_the_batch_as_its_source(
    isolated: tuple[Settings, Any], spark: Any
) -> None:
    """Receipt 8 reaches Kafka 3 days after it happened, beyond the speed layer's 48 h
    lateness bound, so the speed views leave it to the batch layer; and the speed views
    job does not run before the batch (as when it was down while the archiver ran), so
    its index holds nothing of the receipt either. Only `pos-batch run`, folding the
    master dataset, learns of it: the terminal must then hear `accepted`, not `unknown`."""
    settings, cql = isolated
    terminal = Terminal(settings)
    arrived = datetime(2026, 3, 2, 9, 8, 5, tzinfo=UTC) + timedelta(days=3)
    terminal.send(8, message(8), arrived)
    [eight] = terminal.copies(8)
    _archive_only(spark, settings)

    with TestClient(create_app(settings)) as http:
        ask = f"/stores/{STORE}/devices/{DEVICE}/receipts/8"
        before = http.get(ask)
        assert (before.status_code, before.json()["status"], before.json()["known_by"]) == (
            404, "unknown", [],
        )  # fmt: skip

        done = subprocess.run(
            [str(VENV_BIN / "pos-batch"), "run", "--start", "2026-03-01T00:00Z",
             "--end", "2026-03-14T00:00Z", "--lookback-hours", "0"],
            env=env_for(settings), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])["receipts"] == 1

        after = http.get(ask)
        body = after.json()
        assert (after.status_code, body["status"], body["source"], body["known_by"]) == (
            200, "accepted", "batch", ["batch"],
        )  # fmt: skip
        assert (body["winner"], body["first_seen_at"]) == (_kafka(eight), _iso(arrived))
        assert (body["happened_at"], body["day"], body["in_speed_view"]) == (
            "2026-03-02T09:08:00Z", "2026-03-02", False,
        )  # fmt: skip
        assert body["detail"] == (
            f"receipt 8 of device 7 in store 301 is accepted (partition {eight.partition} "
            f"offset {eight.offset}, known to the batch layer only)"
        )
        assert (body["last_resend"], body["conflicts"], body["dead_letters"]) == (None, [], [])

    # Nothing in the speed views: the answer came from the batch layer's index alone.
    assert cql.execute("SELECT * FROM receipt_keys").all() == []
    assert cql.execute("SELECT * FROM receipts_by_store_day").all() == []

    # The CLI answers the same and exits 0 (a script resends only on exit 3).
    shown = subprocess.run(
        [str(VENV_BIN / "pos-serve"), "receipt", "--store", str(STORE), "--device",
         str(DEVICE), "--transaction", "8", "--json"],
        env=env_for(settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert (answer["status"], answer["source"], answer["known_by"]) == (
        "accepted", "batch", ["batch"],
    )  # fmt: skip
