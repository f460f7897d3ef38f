"""One receipt per natural key: the winner rule, resends and conflicts (shared core).

**The winner rule.** Of all copies of a receipt (same `operation_id`,
`vendor_fiscal_module`, `transaction_id`, wherever their `happened_at` puts them),
the winner is the copy that comes first in Kafka's own order: the lowest
`(kafka_partition, kafka_offset)`. Records are keyed by device, so all copies of a
receipt share a partition and this is simply the first one Kafka appended; the
record timestamp (chosen by the producer's clock) plays no part. The winner's
content, `happened_at` and `late` flag are the receipt's.

Every other copy is a *duplicate*: a **resend** when its content hash equals the
winner's, a **conflict** otherwise (kept with both versions, never dropped).

The batch layer applies `resolve` to every copy in the master dataset. The speed
layer applies `decide_batch` to one micro-batch and the winners it stored before:
a stored winner is final (it never moves, so a window never loses a receipt). Both
give the same winners, since the speed layer reads each partition in offset order;
only copies of one receipt spread over several partitions (a producer that does not
key by device) can be resolved differently, and only when they reach the speed
layer in different micro-batches: the speed layer then keeps its first choice.

A stored winner is what the speed layer's natural-key index keeps: INDEX_COLUMNS,
what the rule reads, not the receipt's content (its line items and totals, the
index's most expensive columns to write and read back). So a conflict with a winner
of an earlier micro-batch comes without the winner's content; `with_winner_content`
adds it from the winner's raw row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pos_lambda.schemas import cql
from pos_lambda.schemas.contract import NATURAL_KEY
from pos_lambda.schemas.cql import INDEX_LEAVES_OUT
from pos_lambda.views.records import COORDINATES, RECEIPT_ROW_COLUMNS, RECEIPT_SCHEMA

# Columns describing one version of a receipt in a conflict (the copy's, and the
# winner's with a `winner_` prefix).
VERSION_COLUMNS = (
    "day",
    "happened_at",
    "line_items",
    "item_quantity",
    "revenue",
    "content_hash",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
)
CONFLICT_COLUMNS = (
    *NATURAL_KEY,
    *VERSION_COLUMNS,
    *(f"winner_{c}" for c in VERSION_COLUMNS),
    "differs",
)
# What a copy says beyond what the rule reads: the index leaves it out of a stored winner.
CONTENT_COLUMNS = INDEX_LEAVES_OUT
# What `decide_batch` needs of a stored winner: the key, the instant and day, the content
# hash, the Kafka coordinates and the flags.
INDEX_COLUMNS = tuple(c for c in RECEIPT_ROW_COLUMNS if c not in CONTENT_COLUMNS)
TALLY = "tally"  # the name of the tally's observed metrics
_RANK = "_copy_rank"
_WINNER_HASH = "_winner_hash"  # the content hash of the key's winner, on every copy
_STORED = "_stored"
_INCOMING = "_incoming"  # the copy is in the input (not only a stored winner)
_TWIN = "_twin"  # an incoming copy that is the stored winner's own Kafka record
_REPLAYED = "_replayed"  # the key's stored winner has its twin among the copies


def _ranked(copies: DataFrame, *first: str) -> DataFrame:
    """Copies numbered 1, 2, ... per natural key in winner order (`first` columns lead),
    each with its winner's content hash (same window: no second sort)."""
    rank, winner_hash = _rank_columns(first)
    return copies.withColumn(_RANK, rank).withColumn(_WINNER_HASH, winner_hash)


# Built once per driver, not per micro-batch (see src/pos_lambda/views/records.py).
@cache
def _rank_columns(first: tuple[str, ...]) -> tuple[Column, Column]:
    order = Window.partitionBy(*NATURAL_KEY).orderBy(*first, *COORDINATES)
    return F.row_number().over(order), F.first("content_hash").over(order)


@cache
def _won() -> Column:
    return (F.col(_RANK) == 1) & F.col(_INCOMING)


@cache
def _tally() -> tuple[Column, ...]:
    won, lost = _won(), (F.col(_RANK) > 1) & F.col(_INCOMING)
    same = F.col("content_hash") == F.col(_WINNER_HASH)
    counts = {
        "in_view": won & ~F.col("beyond_bound"),
        "late": won & ~F.col("beyond_bound") & F.col("late"),
        "beyond": won & F.col("beyond_bound"),
        "resends": lost & same,
        "conflicts": lost & ~same,
        "incoming": F.col(_INCOMING),  # every incoming copy: how to tell a complete tally
    }
    return tuple(F.count(F.when(test, 1)).alias(name) for name, test in counts.items())


@cache
def _differs() -> Column:
    """Names of the fields in which a copy differs from its winner (of a duplicate's
    columns). A field of the winner not known (null) is not named."""
    fields = ("happened_at", "line_items")
    return F.array_compact(
        F.array(*(F.when(F.col(f) != F.col(f"winner_{f}"), F.lit(f)) for f in fields))
    )


def _duplicates(ranked: DataFrame) -> DataFrame:
    """Every copy that lost, with its winner's version and `conflict`/`differs`."""
    winners = ranked.where(F.col(_RANK) == 1).alias("w")
    losers = ranked.where((F.col(_RANK) > 1) & F.col(_INCOMING)).alias("c")
    return (
        losers.join(winners, [F.col(f"c.{k}") == F.col(f"w.{k}") for k in NATURAL_KEY])
        .select(
            *(F.col(f"c.{k}").alias(k) for k in NATURAL_KEY),
            *(F.col(f"c.{c}").alias(c) for c in VERSION_COLUMNS),
            *(F.col(f"w.{c}").alias(f"winner_{c}") for c in VERSION_COLUMNS),
            (F.col("c.content_hash") != F.col("w.content_hash")).alias("conflict"),
        )
        .withColumn("differs", _differs())
    )


@dataclass(frozen=True)
class Resolution:
    """Every copy ranked per natural key; winners and duplicates derive from it.

    `ranked` is what to materialise once (the window sort is the expensive part);
    `winners` and `duplicates` are cheap selections of it.
    """

    ranked: DataFrame  # copies + _copy_rank (1 = winner) + _incoming
    # What `ranked` was checkpointed from, observing the tally (see `materialised`).
    observed: DataFrame | None = None

    @property
    def winners(self) -> DataFrame:
        """The winners to write: one receipt row per natural key won by an incoming copy."""
        won = self.ranked.where(_won())
        return won.drop(_RANK, _INCOMING, _WINNER_HASH)

    @property
    def duplicates(self) -> DataFrame:
        """Every copy that lost, with its winner's version and `conflict`/`differs`."""
        return _duplicates(self.ranked)

    @property
    def conflicts(self) -> DataFrame:
        return conflicts_of(self.duplicates)

    def tally(self) -> DataFrame:
        """One row: the winners (in the views, late among them, beyond the speed bound)
        and the duplicates (resends, conflicts) of the incoming copies, in one pass."""
        return self.ranked.agg(*_tally())

    def tally_counts(self, incoming: int) -> dict[str, int]:
        """The tally's counts, given how many `incoming` copies the resolution ranked.

        A materialised resolution observed them while its rows were computed (by the
        first action on them): read from there, which saves a Spark job of their own
        (~65 ms of a 10-record speed micro-batch). Only a tally that counts every
        incoming copy is complete; before that first action it counts none (so a
        partial one is never taken): then the tally's own job runs."""
        if self.observed is not None:
            seen = observed_metrics(self.observed, TALLY)
            if seen is not None and seen["incoming"] == incoming:
                return seen
        row: dict[str, int] = self.tally().collect()[0].asDict()  # a global aggregate: one row
        return row

    def materialised(self) -> Resolution:
        """The same resolution, computed once: a local checkpoint of `ranked`, taken by
        the first action on it (not eagerly: that would cost a Spark job of its own);
        every later use reads the checkpointed rows, never the inputs again. The tally
        is observed on the way (Spark's `observe`), for `tally_counts`."""
        observed = self.ranked.observe(TALLY, *_tally())
        return Resolution(observed.localCheckpoint(eager=False), observed)


def observed_metrics(df: DataFrame, name: str) -> dict[str, Any] | None:
    """The metrics `df.observe(name, ...)` has collected so far, by column name (None if
    the plan observes no such name).

    Read from the plan's own execution, at once: PySpark's `Observation.get` waits for an
    action's end event, which a plan computed through a local checkpoint never posts.
    """
    metrics = df._jdf.queryExecution().observedMetrics().get(name)
    if metrics.isEmpty():
        return None
    found: dict[str, Any] = json.loads(metrics.get().json())
    return found


# The receipt_keys columns that record a key's last resend (src/pos_lambda/schemas/cql.py).
RESEND_COLUMNS = tuple(name for name, _ in cql.RESEND_COLUMNS)


def last_resends(duplicates: DataFrame) -> DataFrame:
    """Per natural key, the last copy absorbed as a resend (same content as its winner):
    NATURAL_KEY + RESEND_COLUMNS. One row per key, the copy latest in Kafka's order, so
    that an upsert of these rows has one value per key and a later micro-batch's resend
    (further on in the same partition) replaces an earlier one's."""
    last = F.max(F.struct(*COORDINATES, F.col("kafka_timestamp"))).alias("_last")
    return (
        duplicates.where(~F.col("conflict"))
        .groupBy(*NATURAL_KEY)
        .agg(last)
        .select(
            *NATURAL_KEY,
            *(
                F.col(f"_last.{c}").alias(name)
                for c, name in zip((*COORDINATES, "kafka_timestamp"), RESEND_COLUMNS, strict=True)
            ),
        )
    )


def conflicts_of(duplicates: DataFrame) -> DataFrame:
    """The duplicates whose content differs from their winner's, as CONFLICT_COLUMNS."""
    return duplicates.where("conflict").select(*CONFLICT_COLUMNS)


def winners_to_complete(conflicts: DataFrame) -> DataFrame:
    """The winners whose content a conflict lacks (stored by an earlier micro-batch), by
    the raw receipts' primary key: (operation_id, day, happened_at, vendor_fiscal_module,
    transaction_id)."""
    return conflicts.where(F.col("winner_line_items").isNull()).select(*_winner_key())


def with_winner_content(conflicts: DataFrame, winners: DataFrame) -> DataFrame:
    """`conflicts` (CONFLICT_COLUMNS) with their winners' content filled in from
    `winners` (receipt rows of the natural keys of `winners_to_complete`), and `differs`
    named again. A winner not in `winners` keeps a null content (a receipt beyond the
    speed layer's bound has no raw row; the batch layer rewrites the conflict whole)."""
    content = winners.select(*NATURAL_KEY, *_found())
    return (
        conflicts.join(content, list(NATURAL_KEY), "left")
        .withColumns(
            {
                f"winner_{c}": F.coalesce(F.col(f"winner_{c}"), F.col(f"_found_{c}"))
                for c in CONTENT_COLUMNS
            }
        )
        .withColumn("differs", _differs())
        .select(*CONFLICT_COLUMNS)
    )


@cache
def _found() -> tuple[Column, ...]:
    """A stored receipt's content, typed as a receipt row's (Cassandra's decimals come
    back wider than the contract's)."""
    return tuple(
        F.col(c).cast(RECEIPT_SCHEMA[c].dataType).alias(f"_found_{c}") for c in CONTENT_COLUMNS
    )


@cache
def _winner_key() -> tuple[Column, ...]:
    return (
        F.col("operation_id"),
        F.col("winner_day").alias("day"),
        F.col("winner_happened_at").alias("happened_at"),
        F.col("vendor_fiscal_module"),
        F.col("transaction_id"),
    )


def resolve(copies: DataFrame) -> Resolution:
    """Apply the winner rule to all copies (receipt rows) at once: the batch layer's view."""
    return Resolution(_ranked(copies.withColumn(_INCOMING, F.lit(True))))


def decide_batch(incoming: DataFrame, stored: DataFrame) -> Resolution:
    """One speed micro-batch: which incoming copies win, which are resends or conflicts.

    incoming: this micro-batch's receipt rows. stored: the winners already recorded for
    the natural keys it touches (INDEX_COLUMNS at least; their content is not read). A
    stored winner always stays winner. `winners` are the incoming copies that won: new
    receipts, plus (in a micro-batch replayed after a crash) copies already stored by
    the failed attempt, recognised by their Kafka coordinates, so that the replay
    rewrites the very same rows, from the record itself.

    One plan: the stored winners and the incoming copies in one union, ranked by one
    window per natural key (stored first), so that each input is read once; a join of
    the two would read the stored rows (a Cassandra lookup) once per side.
    """
    stored_copies, incoming_copies = _copy_columns()
    copies = stored.select(*stored_copies).unionByName(
        incoming.withColumns(dict(incoming_copies)),
        allowMissingColumns=True,  # a stored winner's content: null
    )
    twin, replayed, kept, rank = _replay_columns()
    return Resolution(
        _ranked(copies, _STORED)
        .withColumn(_TWIN, twin)
        .withColumn(_REPLAYED, replayed)
        .where(kept)
        .withColumn(_RANK, rank)
        .drop(_STORED, _TWIN, _REPLAYED)
    )


@cache
def _copy_columns() -> tuple[tuple[Column, ...], tuple[tuple[str, Column], ...]]:
    """A stored winner's columns as a copy (not incoming, ranked first); an incoming
    copy's added columns (pairs, not a dict: the cache hands the same value to every
    caller, so it stays immutable)."""
    stored = (
        *(F.col(c) for c in INDEX_COLUMNS),
        F.lit(False).alias(_INCOMING),
        F.lit(0).alias(_STORED),
    )
    return stored, ((_INCOMING, F.lit(True)), (_STORED, F.lit(1)))


@cache
def _replay_columns() -> tuple[Column, Column, Column, Column]:
    """A replay: the incoming twin of the stored winner (its own Kafka record) stands in
    for it: the twin ranks first and the stored row goes (it lacks the content). (Copies
    have distinct coordinates, so only that twin shares the winner's.) The twin, whether
    the key has one, which copies stay, and their rank."""
    order = Window.partitionBy(*NATURAL_KEY).orderBy(_STORED, *COORDINATES)
    whole = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    coords = F.struct(*COORDINATES)
    twin = (F.col(_RANK) > 1) & (coords == F.first(coords).over(order))
    kept = F.col(_INCOMING) | ~F.col(_REPLAYED)
    rank = F.when(F.col(_TWIN), F.lit(1)).otherwise(F.col(_RANK))
    return twin, F.max(_TWIN).over(whole), kept, rank
