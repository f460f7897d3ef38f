"""The speed layer under hostile but realistic input (real Kafka, Spark, Cassandra).

Each test here failed on the speed layer before the shared core moved to `src/pos_lambda/views/`:
a receipt at the contract's limits stopped both queries for good; a resend whose
happened_at differs was stored and counted twice; the producer's clock chose the
winner; conflicting copies vanished without a count.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.schemas import cql as tables
from pos_lambda.settings import Settings
from tests.integration.speed_helpers import (
    device_key,
    master_rows,
    ms,
    produce_raw,
    raw_rows,
    receipt_json,
    run_available_now,
    speed_aggregates,
)

pytestmark = pytest.mark.integration

AT = datetime(2026, 3, 2, 9, 3, 0, tzinfo=UTC)
# Every way to read the stored rows and write the views: by the driver, one CQL query per
# key and per row (a small micro-batch after a small one, the default); through the
# connector, reading one row per receipt (the default otherwise) or whole receipt_keys
# partitions (a backlog). Each forced here.
BY_READS = pytest.mark.parametrize(
    "reads",
    [
        {"speed_driver_reads_below": 10**9, "speed_driver_writes_below": 10**9},
        {
            "speed_driver_reads_below": 0,
            "speed_driver_writes_below": 0,
            "speed_bucket_reads_from": 50.0,
        },
        {
            "speed_driver_reads_below": 0,
            "speed_driver_writes_below": 0,
            "speed_bucket_reads_from": 0.001,
        },
    ],
    ids=["driver_reads_writes", "receipt_reads", "partition_reads"],
)
BIGGEST_ITEMS = [{"title": "x" * 200, "price": "9999999999.99", "amount": 10000}] * 200


def _counts(cql: Any, table: str) -> int:
    return int(cql.execute(f"SELECT COUNT(*) FROM {table}").one()[0])


def _last_views_batch(settings: Settings) -> dict[str, Any]:
    """Counts of the views query's last micro-batch, from the speed layer's status file."""
    status: dict[str, Any] = json.loads(settings.speed_status_file.read_text())
    return status["pos-speed-views"]  # type: ignore[no-any-return]


# The views query validates a micro-batch natively first in a run's first micro-batch
# and after a large one (a backlog), else with the contract's validator alone; both
# ways here (the archiver always validates natively first).
@pytest.mark.parametrize("native_from", [10**9, 0], ids=["validator_alone", "native_first"])
def test_a_receipt_at_every_contract_limit_lands_between_two_normal_ones(
    isolated: tuple[Settings, Any], native_from: int, spark: Any
) -> None:
    settings, cql = isolated
    settings = settings.with_overrides(**{"speed_native_check_from": native_from})
    normal_1 = receipt_json(1, 1, 1, AT)
    biggest = receipt_json(2147483647, 2147483647, 2**63 - 1, AT, BIGGEST_ITEMS)
    normal_2 = receipt_json(1, 1, 2, AT + timedelta(seconds=1))
    hostile = [
        receipt_json(1, 1, 3, "2026-03-02T09:03:00Z\n"),  # trailing newline
        receipt_json(1, 1, 4, AT).replace(b'"transaction_id": 4', b'"transaction_id": 1e17'),
        receipt_json(1, 1, 5, AT).replace(
            b'"transaction_id": 5', b'"transaction_id": ' + b"9" * 5000
        ),
        receipt_json(1, 1, 6, AT, [{"title": "\ud800", "price": "1.00", "amount": 1}]),
    ]
    values = [normal_1, biggest, normal_2, *hostile]
    produce_raw(settings, values, [ms(AT + timedelta(seconds=5))] * len(values))

    run_available_now(spark, settings)  # asserts that neither query failed

    stored = raw_rows(cql)
    assert set(stored) == {(1, 1, 1), (1, 1, 2), (2147483647, 2147483647, 2**63 - 1)}
    top = stored[(2147483647, 2147483647, 2**63 - 1)]
    assert Decimal(top.revenue) == Decimal("19999999999980000.00")
    assert top.item_quantity == 2_000_000 and len(top.line_items) == 200
    window = datetime(2026, 3, 2, 9, 0)
    assert speed_aggregates(cql)[(2147483647, window)] == (
        1, 2_000_000, Decimal("19999999999980000.00"), 0,
    )  # fmt: skip
    assert speed_aggregates(cql)[(1, window)] == (2, 4, Decimal("7.60"), 0)
    dead = [r.reason for r in cql.execute(f"SELECT reason FROM {tables.DEAD_LETTERS_TABLE}")]
    assert sorted(dead) == sorted(
        ["bad_timestamp", "wrong_type:transaction_id", "invalid_json", "invalid_encoding"]
    )
    assert len(master_rows(spark, settings)) == len(values)


@BY_READS
def test_resends_whose_time_differs_count_once_across_windows_and_midnight(
    isolated: tuple[Settings, Any], reads: dict[str, float], spark: Any
) -> None:
    settings, cql = isolated
    settings = settings.with_overrides(**reads)
    before_midnight = datetime(2026, 3, 2, 23, 59, 59, 600000, tzinfo=UTC)
    before_quarter = datetime(2026, 3, 3, 10, 14, 59, 700000, tzinfo=UTC)
    first = [
        receipt_json(5, 1, 100, before_midnight),
        receipt_json(5, 1, 101, before_quarter),
    ]
    sent = ms(before_quarter + timedelta(seconds=2))
    produce_raw(settings, first, [sent] * 2, [device_key(5, 1)] * 2)
    run_available_now(spark, settings)

    # A gateway that rounds to the second resends both in a later micro-batch: one
    # copy lands on the next UTC day, the other in a window that is otherwise empty.
    resent = [
        receipt_json(5, 1, 100, "2026-03-03T00:00:00+00:00"),
        receipt_json(5, 1, 101, "2026-03-03T10:15:00+00:00"),
    ]
    produce_raw(settings, resent, [sent + 10_000] * 2, [device_key(5, 1)] * 2)
    run_available_now(spark, settings)

    assert set(raw_rows(cql)) == {(5, 1, 100), (5, 1, 101)}
    aggregates = speed_aggregates(cql)
    assert aggregates == {
        (5, datetime(2026, 3, 2, 23, 45)): (1, 2, Decimal("3.80"), 1),
        (5, datetime(2026, 3, 3, 10, 0)): (1, 2, Decimal("3.80"), 0),
    }
    conflicts = cql.execute(f"SELECT * FROM {tables.CONFLICTS_TABLE}").all()
    assert sorted((c.transaction_id, c.day, c.winner_day, c.differs) for c in conflicts) == [
        (100, date(2026, 3, 3), date(2026, 3, 2), ["happened_at"]),
        (101, date(2026, 3, 3), date(2026, 3, 3), ["happened_at"]),
    ]
    last = _last_views_batch(settings)
    assert (last["conflicts"], last["resends_absorbed"]) == (2, 0)


@BY_READS
def test_a_later_copy_stamped_earlier_never_replaces_the_stored_receipt(
    isolated: tuple[Settings, Any], reads: dict[str, float], spark: Any
) -> None:
    settings, cql = isolated
    settings = settings.with_overrides(**reads)
    tea = [{"title": "Tea", "price": "2.00", "amount": 1}]
    cake = [{"title": "Cake", "price": "5.00", "amount": 3}]
    # The first copy reaches Kafka 20 minutes after the sale: the receipt is late.
    produce_raw(
        settings, [receipt_json(7, 2, 1, AT, tea)], [ms(AT + timedelta(minutes=20))],
        [device_key(7, 2)],
    )  # fmt: skip
    run_available_now(spark, settings)
    # A later copy with other items, stamped by a producer clock one minute after.
    produce_raw(
        settings, [receipt_json(7, 2, 1, AT, cake)], [ms(AT + timedelta(minutes=1))],
        [device_key(7, 2)],
    )  # fmt: skip
    run_available_now(spark, settings)

    row = raw_rows(cql)[(7, 2, 1)]
    assert (row.line_items[0].title, Decimal(row.revenue), row.late) == (
        "Tea",
        Decimal("2.00"),
        True,
    )
    assert speed_aggregates(cql) == {(7, datetime(2026, 3, 2, 9, 0)): (1, 1, Decimal("2.00"), 1)}
    [conflict] = cql.execute(f"SELECT * FROM {tables.CONFLICTS_TABLE}").all()
    assert (conflict.line_items[0].title, conflict.winner_line_items[0].title) == ("Cake", "Tea")
    assert (Decimal(conflict.revenue), Decimal(conflict.winner_revenue)) == (
        Decimal("15.00"), Decimal("2.00"),
    )  # fmt: skip
    assert conflict.differs == ["line_items"]
    assert conflict.kafka_offset > conflict.winner_kafka_offset


def test_a_conflict_with_a_winner_beyond_the_bound_is_kept_without_its_winner_content(
    isolated: tuple[Settings, Any], spark: Any
) -> None:
    """The index keeps no content and a receipt beyond the speed bound has no raw row:
    the conflict is recorded with what is known of its winner, and served."""
    from pos_lambda.serving import Serving

    settings, cql = isolated
    tea = [{"title": "Tea", "price": "2.00", "amount": 1}]
    cake = [{"title": "Cake", "price": "5.00", "amount": 3}]
    three_days = ms(AT + timedelta(days=3))  # past the default 48 h bound
    on_time = receipt_json(8, 2, 2, AT, tea)  # the store's one receipt in the speed views
    produce_raw(
        settings, [receipt_json(8, 2, 1, AT, tea), on_time], [three_days, ms(AT)],
        [device_key(8, 2)] * 2,
    )  # fmt: skip
    run_available_now(spark, settings)
    produce_raw(
        settings, [receipt_json(8, 2, 1, AT, cake)], [three_days + 1000], [device_key(8, 2)]
    )  # fmt: skip
    run_available_now(spark, settings)

    assert set(raw_rows(cql)) == {(8, 2, 2)}
    [c] = cql.execute(f"SELECT * FROM {tables.CONFLICTS_TABLE}").all()
    assert (c.line_items[0].title, Decimal(c.revenue), c.winner_line_items, c.winner_revenue) == (
        "Cake", Decimal("15.00"), None, None,
    )  # fmt: skip
    assert (c.differs, c.winner_kafka_offset < c.kafka_offset) == (None, True)  # none known
    with Serving(settings) as serving:
        [served] = serving.store_day(8, AT.date()).conflicts
    assert (served.revenue, served.winner_revenue, served.differs) == (Decimal("15.00"), None, [])


@BY_READS
def test_copies_in_one_micro_batch_resolve_like_copies_across_batches(
    isolated: tuple[Settings, Any], reads: dict[str, float], spark: Any, tmp_path: Path
) -> None:
    settings, cql = isolated
    settings = settings.with_overrides(**reads)
    key = [device_key(9, 1)] * 4
    values = [
        receipt_json(9, 1, 1, AT),
        receipt_json(9, 1, 1, AT),  # a resend: same bytes
        receipt_json(9, 1, 1, AT + timedelta(days=1)),  # a conflict on another day
        receipt_json(9, 1, 2, AT),
    ]
    produce_raw(settings, values, [ms(AT + timedelta(seconds=s)) for s in (5, 9, 7, 6)], key)
    run_available_now(spark, settings)
    assert set(raw_rows(cql)) == {(9, 1, 1), (9, 1, 2)}
    assert speed_aggregates(cql) == {(9, datetime(2026, 3, 2, 9, 0)): (2, 4, Decimal("7.60"), 0)}
    last = _last_views_batch(settings)
    assert (last["valid_rows"], last["resends_absorbed"], last["conflicts"]) == (4, 1, 1)
    assert _counts(cql, tables.RECEIPT_KEYS_TABLE) == 2


@pytest.mark.parametrize(
    "writes",
    [{"speed_driver_writes_below": 10**9}, {"speed_driver_writes_below": 0}],
    ids=["driver_writes", "connector_writes"],
)
def test_oversized_junk_becomes_bounded_dead_letters_and_the_stream_goes_on(
    isolated: tuple[Settings, Any], writes: dict[str, int], spark: Any
) -> None:
    """60 junk values of 300 KB in one partition (valid Kafka records under its 1 MB
    default) made the driver's dead-letter batch one 18 MB CQL message, over Cassandra's
    16 MiB limit: the micro-batch failed on every replay and no dead letter was written."""
    settings, cql = isolated
    settings = settings.with_overrides(**writes)
    junk = [random.Random(n).randbytes(300_000) for n in range(60)]
    after = receipt_json(3, 1, 1, AT)
    key = device_key(3, 1)  # one key: every record in one partition, the receipt last
    produce_raw(settings, [*junk, after], [ms(AT + timedelta(seconds=5))] * 61, [key] * 61)

    run_available_now(spark, settings)  # asserts that neither query failed

    assert set(raw_rows(cql)) == {(3, 1, 1)}
    assert speed_aggregates(cql) == {(3, datetime(2026, 3, 2, 9, 0)): (1, 2, Decimal("3.80"), 0)}
    dead = cql.execute(
        "SELECT kafka_partition, kafka_offset, raw_value, value_length, value_sha256, reason "
        f"FROM {tables.DEAD_LETTERS_TABLE}"
    ).all()
    [partition] = {d.kafka_partition for d in dead}
    assert sorted(
        (d.kafka_offset, bytes(d.raw_value), d.value_length, d.value_sha256, d.reason) for d in dead
    ) == [
        (n, value[:4096], 300_000, hashlib.sha256(value).hexdigest(), "too_large")
        for n, value in enumerate(junk)
    ]
    archived = {
        r.kafka_offset: bytes(r.raw_value)
        for r in master_rows(spark, settings)
        if r.kafka_partition == partition
    }
    assert archived == {**dict(enumerate(junk)), 60: after}


def test_a_missing_input_topic_is_named_with_the_command_that_creates_it(
    isolated: tuple[Settings, Any],
) -> None:
    import subprocess

    from tests.integration.speed_helpers import VENV_BIN, env_for

    settings, _ = isolated
    missing = settings.with_overrides(**{"topic_transactions": "no.such.topic"})
    done = subprocess.run(
        [str(VENV_BIN / "pos-speed"), "run", "--available-now"],
        env=env_for(missing),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "topic 'no.such.topic' does not exist" in done.stderr
    assert "make topics" in done.stderr and "Traceback" not in done.stderr
