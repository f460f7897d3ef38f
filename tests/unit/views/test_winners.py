"""The winner rule, resends and conflicts on literal rows (local Spark, no services).

`decide_batch` is the speed layer's decision for one micro-batch, tested here without
Cassandra: the stored winners are a literal DataFrame too.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from pos_lambda.views.records import RECEIPT_ROW_COLUMNS
from pos_lambda.views.winners import (
    TALLY,
    decide_batch,
    observed_metrics,
    resolve,
    winners_to_complete,
    with_winner_content,
)

ROW_DDL = (
    "operation_id int, day date, happened_at timestamp, transaction_id bigint, "
    "vendor_fiscal_module int, line_items array<struct<title:string,price:decimal(12,2),"
    "amount:int>>, item_quantity bigint, revenue decimal(19,2), content_hash string, "
    "kafka_partition int, kafka_offset bigint, kafka_timestamp timestamp, late boolean, "
    "beyond_bound boolean"
)
T0 = datetime(2026, 3, 2, 23, 59, 59, 600000, tzinfo=UTC)
TEA = [("Tea", Decimal("1.50"), 2)]
CAKE = [("Cake", Decimal("4.00"), 1)]


def _copy(
    tid: int,
    offset: int,
    at: datetime = T0,
    items: list[tuple[str, Decimal, int]] = TEA,
    partition: int = 0,
    sent: datetime | None = None,
) -> tuple[Any, ...]:
    """A receipt row of store 1, device 7; the hash stands for (happened_at, items)."""
    qty = sum(i[2] for i in items)
    revenue = sum((i[1] * i[2] for i in items), Decimal("0.00"))
    digest = f"{at.isoformat()}|{items}"
    sent = sent or at + timedelta(seconds=5)
    return (1, at.date(), at, tid, 7, items, qty, revenue, digest, partition, offset, sent,
            False, False)  # fmt: skip


def _rows(spark: Any, *rows: tuple[Any, ...]) -> DataFrame:
    df = spark.createDataFrame(list(rows), ROW_DDL)
    assert tuple(df.columns) == RECEIPT_ROW_COLUMNS  # the literal schema is the real one
    return df


def _coords(df: DataFrame) -> DataFrame:
    return df.select("transaction_id", "kafka_partition", "kafka_offset")


def _expect(spark: Any, *rows: tuple[int, int, int]) -> DataFrame:
    return spark.createDataFrame(
        list(rows), "transaction_id bigint, kafka_partition int, kafka_offset bigint"
    )


def test_first_copy_in_kafka_order_wins_whatever_the_producer_clock_says(
    local_spark: Any,
) -> None:
    incoming = _rows(
        local_spark,
        _copy(1, offset=3, sent=T0 + timedelta(seconds=40)),
        # A later copy stamped earlier by its producer: it does not win.
        _copy(1, offset=9, sent=T0 - timedelta(hours=1)),
        _copy(2, offset=4),
    )
    decision = decide_batch(incoming, _rows(local_spark))
    assertDataFrameEqual(_coords(decision.winners), _expect(local_spark, (1, 0, 3), (2, 0, 4)))
    assertDataFrameEqual(
        decision.duplicates.select(
            "transaction_id", "kafka_offset", "winner_kafka_offset", "conflict", "differs"
        ),
        local_spark.createDataFrame(
            [(1, 9, 3, False, [])],
            "transaction_id bigint, kafka_offset bigint, winner_kafka_offset bigint, "
            "conflict boolean, differs array<string>",
        ),
    )


def test_a_stored_winner_stays_and_a_copy_across_midnight_is_a_conflict(
    local_spark: Any,
) -> None:
    stored = _rows(local_spark, _copy(1, offset=3))  # 23:59:59.6 on 2 March
    rounded = T0.replace(microsecond=0) + timedelta(seconds=1)  # 00:00:00 on 3 March
    incoming = _rows(local_spark, _copy(1, offset=20, at=rounded), _copy(2, offset=21))
    decision = decide_batch(incoming, stored)
    assertDataFrameEqual(_coords(decision.winners), _expect(local_spark, (2, 0, 21)))
    assertDataFrameEqual(
        decision.conflicts.select(
            "transaction_id",
            "day",
            "kafka_offset",
            "winner_day",
            "winner_kafka_offset",
            "differs",
        ),
        local_spark.createDataFrame(
            [(1, date(2026, 3, 3), 20, date(2026, 3, 2), 3, ["happened_at"])],
            "transaction_id bigint, day date, kafka_offset bigint, winner_day date, "
            "winner_kafka_offset bigint, differs array<string>",
        ),
    )


def test_a_copy_with_other_items_is_a_conflict_with_both_versions(local_spark: Any) -> None:
    stored = _rows(local_spark, _copy(1, offset=3))
    decision = decide_batch(_rows(local_spark, _copy(1, offset=8, items=CAKE)), stored)
    assert decision.winners.count() == 0
    # A stored winner is what the index keeps: no content, so none named as differing.
    [bare] = decision.conflicts.collect()
    assert (bare.line_items[0].title, bare.winner_line_items) == ("Cake", None)
    assert (bare.revenue, bare.winner_revenue, bare.differs) == (Decimal("4.00"), None, [])
    assert [tuple(k) for k in winners_to_complete(decision.conflicts).collect()] == [
        (1, T0.date(), T0.replace(tzinfo=None), 7, 1)
    ]
    # ... the winner's raw row gives it.
    [conflict] = with_winner_content(decision.conflicts, stored).collect()
    assert (conflict.line_items[0].title, conflict.winner_line_items[0].title) == ("Cake", "Tea")
    assert (conflict.revenue, conflict.winner_revenue) == (Decimal("4.00"), Decimal("3.00"))
    assert (conflict.winner_item_quantity, conflict.differs) == (2, ["line_items"])


def test_a_conflict_in_one_batch_has_its_winner_content_at_once(local_spark: Any) -> None:
    incoming = _rows(local_spark, _copy(1, offset=3), _copy(1, offset=8, items=CAKE))
    [conflict] = decide_batch(incoming, _rows(local_spark)).conflicts.collect()
    assert (conflict.winner_line_items[0].title, conflict.differs) == ("Tea", ["line_items"])


def test_a_replayed_batch_rewrites_its_own_winners(local_spark: Any) -> None:
    # The failed attempt stored receipt 1 (offset 3) before the crash; the replay
    # meets it in the stored winners and must rewrite it, not count it as a resend.
    stored = _rows(local_spark, _copy(1, offset=3))
    incoming = _rows(local_spark, _copy(1, offset=3), _copy(1, offset=5), _copy(2, offset=6))
    decision = decide_batch(incoming, stored)
    assertDataFrameEqual(_coords(decision.winners), _expect(local_spark, (1, 0, 3), (2, 0, 6)))
    # From the record itself: the index does not keep the content.
    assertDataFrameEqual(
        decision.winners.select("transaction_id", "item_quantity", "revenue"),
        local_spark.createDataFrame(
            [(1, 2, Decimal("3.00")), (2, 2, Decimal("3.00"))],
            "transaction_id bigint, item_quantity bigint, revenue decimal(19,2)",
        ),
    )
    assertDataFrameEqual(
        decision.duplicates.select("transaction_id", "kafka_partition", "kafka_offset"),
        _expect(local_spark, (1, 0, 5)),
    )


def test_a_replay_keeps_its_stored_winner_over_an_earlier_copy_of_another_partition(
    local_spark: Any,
) -> None:
    # The stored winner (partition 1) came first; a copy in partition 0 (a producer that
    # does not key by device) arrives in the replayed batch beside the winner's record.
    stored = _rows(local_spark, _copy(1, offset=6, partition=1))
    incoming = _rows(local_spark, _copy(1, offset=2, partition=0), _copy(1, offset=6, partition=1))
    decision = decide_batch(incoming, stored)
    assertDataFrameEqual(_coords(decision.winners), _expect(local_spark, (1, 1, 6)))
    assertDataFrameEqual(_coords(decision.duplicates), _expect(local_spark, (1, 0, 2)))


def test_batch_resolution_picks_the_same_winners_from_all_copies(local_spark: Any) -> None:
    copies = _rows(
        local_spark,
        _copy(1, offset=3),
        _copy(1, offset=20, at=T0 + timedelta(days=1)),  # another day: a conflict
        _copy(1, offset=21),  # same content: a resend
        _copy(2, offset=6, partition=1),
        _copy(2, offset=2, partition=2),  # copies in two partitions: lower partition wins
    )
    result = resolve(copies)
    assertDataFrameEqual(_coords(result.winners), _expect(local_spark, (1, 0, 3), (2, 1, 6)))
    assertDataFrameEqual(
        result.duplicates.select("transaction_id", "kafka_offset", "conflict"),
        local_spark.createDataFrame(
            [(1, 20, True), (1, 21, False), (2, 2, False)],
            "transaction_id bigint, kafka_offset bigint, conflict boolean",
        ),
    )


def test_tally_counts_winners_and_duplicates_in_one_pass(local_spark: Any) -> None:
    incoming, stored = _six_copies(local_spark)
    [row] = decide_batch(incoming, stored).tally().collect()
    assert row.asDict() == TALLY_OF_SIX


TALLY_OF_SIX = {"in_view": 2, "late": 1, "beyond": 1, "resends": 2, "conflicts": 1, "incoming": 6}


def _six_copies(spark: Any) -> tuple[DataFrame, DataFrame]:
    """The stored winner and the six incoming copies of the tally test."""
    late = (*_copy(4, offset=12, sent=T0 + timedelta(hours=2))[:12], True, False)
    beyond = (*_copy(5, offset=13)[:13], True)
    incoming = _rows(
        spark,
        _copy(1, offset=8),  # a resend of the stored winner
        _copy(1, offset=9, items=CAKE),  # a conflict with it
        _copy(2, offset=10),  # new
        _copy(2, offset=11),  # its resend in the same batch
        late,
        beyond,
    )
    return incoming, _rows(spark, _copy(1, offset=3))


def test_a_materialised_resolution_observes_its_tally_when_its_rows_are_computed(
    local_spark: Any,
) -> None:
    incoming, stored = _six_copies(local_spark)
    decision = decide_batch(incoming, stored).materialised()
    assert decision.observed is not None
    # Before any action on its rows nothing is counted: tally_counts runs the tally's job.
    assert observed_metrics(decision.observed, TALLY) == dict.fromkeys(TALLY_OF_SIX, 0)
    assert decision.tally_counts(incoming=6) == TALLY_OF_SIX
    assert decision.winners.count() == 3  # the first action computes the rows
    assert observed_metrics(decision.observed, TALLY) == TALLY_OF_SIX
    assert decision.tally_counts(incoming=6) == TALLY_OF_SIX
    assert observed_metrics(decision.ranked, TALLY) is None  # no such observation there
