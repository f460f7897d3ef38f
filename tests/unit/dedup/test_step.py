"""The deduplicated topic's step on literal records: the first copy of a natural key in
offset order is emitted as sent, with its key and headers; resends, conflicts and
refused records emit nothing; a replay and a state rebuilt from a prefix give the same
records."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from pos_lambda.dedup.step import DedupState, DedupStep
from pos_lambda.transactional.step import Output, Source

AT = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
AT_MICROS = 1772438400000000  # 2026-03-02T08:00:00Z
ESPRESSO = {"title": "Espresso", "price": "1.90", "amount": 2}
STEP = DedupStep()


def msg(
    tid: int,
    items: list[dict[str, Any]] | None = None,
    store: int = 101,
    device: int = 1001,
    at: str = "2026-03-02T08:00:00+00:00",
) -> bytes:
    return json.dumps(
        {
            "happened_at": at,
            "operation_id": store,
            "transaction_id": tid,
            "vendor_fiscal_module": device,
            "transactions": items or [ESPRESSO],
        }
    ).encode()


def feed(values: list[bytes | None], state: DedupState | None = None, first: int = 0) -> list[Any]:
    """(key, value, headers) of every output, feeding `values` from offset `first`."""
    state = state if state is not None else STEP.initial()
    out: list[Output] = []
    for offset, value in enumerate(values, start=first):
        out += STEP.apply(state, value, Source(3, offset, 1_000 + offset))
    return [(o.key, o.value, dict(o.headers)) for o in out]


def espresso_hash() -> str:
    # The canonical content text spelled out in views/content.py, written by hand here.
    text = f'{{"col1":{AT_MICROS},"line_items":[{{"title":"Espresso","price":1.90,"amount":2}}]}}'
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_first_copy_is_emitted_as_sent_and_later_copies_are_not() -> None:
    original = msg(42)
    # The same content written otherwise (another offset, "1.9"): a resend.
    resend = msg(42, items=[{"title": "Espresso", "price": "1.9", "amount": 2}],
                 at="2026-03-02T09:00:00+01:00")  # fmt: skip
    conflict = msg(42, items=[{"title": "Espresso", "price": "1.90", "amount": 3}])
    assert feed([original, resend, conflict, original, msg(43)]) == [
        (b"101:1001:42", original, {"pos.source": b"3:0", "pos.content_hash":
                                    espresso_hash().encode()}),
        (b"101:1001:43", msg(43), {"pos.source": b"3:4", "pos.content_hash":
                                   espresso_hash().encode()}),
    ]  # fmt: skip


def test_the_first_copy_in_offset_order_wins_whatever_it_says() -> None:
    """A conflicting copy that Kafka got first is the winner (views/winners.py: lowest
    offset; the instant and the record timestamp play no part)."""
    early_conflict = msg(7, items=[{"title": "Tea", "price": "2.00", "amount": 1}],
                         at="2026-03-02T08:30:00+00:00")  # fmt: skip
    assert [(k, v) for k, v, _ in feed([early_conflict, msg(7)])] == [
        (b"101:1001:7", early_conflict)
    ]


def test_the_natural_key_has_three_parts() -> None:
    same_number = [msg(5), msg(5, device=1002), msg(5, store=102)]
    assert [k for k, _, _ in feed(same_number)] == [
        b"101:1001:5",
        b"101:1002:5",
        b"102:1001:5",
    ]


def test_refused_records_emit_nothing_and_do_not_claim_their_key() -> None:
    negative = msg(9, items=[{"title": "Espresso", "price": "-1.90", "amount": 2}])
    state = STEP.initial()
    out = feed([None, b"{not json", negative, msg(9)], state)
    assert [(k, v) for k, v, _ in out] == [(b"101:1001:9", msg(9))]
    assert (state.invalid, state.resends, state.conflicts) == (3, 0, 0)


def test_resends_and_conflicts_are_counted_in_the_state() -> None:
    state = STEP.initial()
    conflict = msg(1, items=[{"title": "Espresso", "price": "1.90", "amount": 3}])
    feed([msg(1), msg(1), conflict, conflict, msg(2)], state)
    assert (state.invalid, state.resends, state.conflicts) == (0, 2, 1)


def test_a_state_rebuilt_from_a_prefix_continues_as_an_uninterrupted_run() -> None:
    """What the shell relies on after a restart: replaying the records below the
    committed offset (outputs dropped) and going on gives exactly the outputs of the
    run that never stopped, and a replay from scratch gives the same bytes."""
    records = [msg(1), msg(2), msg(1), b"oops", msg(3), msg(2), msg(4), msg(3), msg(5)]
    whole = feed(records)
    for cut in range(len(records) + 1):
        rebuilt = STEP.initial()
        feed(records[:cut], rebuilt)
        rest = feed(records[cut:], rebuilt, first=cut)
        assert rest == [o for o in whole if int(o[2]["pos.source"].split(b":")[1]) >= cut]
    assert feed(records) == whole
    assert [k for k, _, _ in whole] == [b"101:1001:1", b"101:1001:2", b"101:1001:3",
                                        b"101:1001:4", b"101:1001:5"]  # fmt: skip
