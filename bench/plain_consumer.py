"""The peer: a plain single-process Python consumer, as a user might write instead of Spark.

Written for the benchmark (bench/speed_vs_plain.py), not part of the pipeline. It is
the obvious alternative to the speed layer's views query:

    confluent-kafka (read_committed) -> the contract's own `parse_message`
    -> an in-memory natural-key set (first copy in Kafka order wins)
    -> cassandra-driver `execute_concurrent` upserts of the raw rows, the dead
       letters and the touched windows' absolute 15-minute aggregates

into the same tables as the speed views (src/pos_lambda/schemas/cql.py), in its own keyspace. What
it gives up for its speed: its dedup state lives in memory, so a restart forgets
which receipts it has seen (a replay after a crash double-counts), and nothing beyond
one process scales it. It records no conflicts and no `receipt_keys`.

    python -m bench.plain_consumer --topic T --keyspace K [--ledger DIR]

reads T from the beginning to its end (as `pos-speed run --available-now`), prints
a JSON line with events/s, and with --ledger checks its tables against the producer's
ledger (exit 1 when they differ: its numbers count only when exact).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench import harness
from pos_lambda.adapters import cassandra_client, schema_apply
from pos_lambda.schemas import contract, cql
from pos_lambda.schemas.contract import Invalid, parse_message
from pos_lambda.settings import Settings, load_settings
from pos_lambda.views.windows import WINDOW

WINDOW_S = int(WINDOW.total_seconds())
LATE_US = int(contract.LATE_THRESHOLD.total_seconds() * 1_000_000)


def _insert(keyspace: str, table: str, columns: tuple[str, ...]) -> str:
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {keyspace}.{table} ({', '.join(columns)}) VALUES ({marks})"


RAW = ("operation_id", "day", "happened_at", "vendor_fiscal_module", "transaction_id",
       "line_items", "item_quantity", "revenue", "kafka_partition", "kafka_offset",
       "kafka_timestamp", "late")  # fmt: skip
AGG = ("operation_id", "day", "window_start", "receipt_count", "item_quantity", "revenue",
       "late_count")  # fmt: skip
DEAD = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key",
        "raw_value", "reason", "detail")  # fmt: skip


def _micros(ts: datetime) -> int:
    return int(ts.timestamp()) * 1_000_000 + ts.microsecond


def consume(settings: Settings, keyspace: str, max_lateness_hours: float = 48.0) -> dict[str, Any]:
    """Read the topic from its beginning to its end, write the views; return the numbers."""
    from cassandra.concurrent import execute_concurrent_with_args
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    cluster = cassandra_client.cluster(settings, writes=True)
    session = cluster.connect()
    raw_stmt = session.prepare(_insert(keyspace, cql.RAW_TABLE, RAW))
    agg_stmt = session.prepare(_insert(keyspace, cql.AGG_SPEED_TABLE, AGG))
    dead_stmt = session.prepare(_insert(keyspace, cql.DEAD_LETTERS_TABLE, DEAD))
    consumer = Consumer(
        {
            **settings.kafka.security_config,
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"plain-{keyspace}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    topic = settings.topics.transactions
    partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])  # from the start
    max_lateness_us = int(max_lateness_hours * 3600 * 1_000_000)

    seen: set[tuple[int, int, int]] = set()
    windows: dict[tuple[int, datetime], list[Any]] = {}  # absolute aggregates
    at_end: set[int] = set()
    counts = {"messages": 0, "receipts": 0, "resends": 0, "invalid": 0, "beyond": 0}
    started: float | None = None
    started_at = 0.0  # time.time() of the first message: a span other tools can align
    while len(at_end) < len(partitions):
        batch = consumer.consume(num_messages=10_000, timeout=1.0)
        raw_rows, dead_rows, touched = [], [], set()
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                    continue
                raise RuntimeError(f"Kafka: {err}")
            if started is None:
                started, started_at = time.perf_counter(), time.time()
            counts["messages"] += 1
            at_end.discard(msg.partition())
            kafka_ts = datetime.fromtimestamp(msg.timestamp()[1] / 1000, UTC)
            value = msg.value()
            result = parse_message(value) if value is not None else Invalid("empty_value")
            if isinstance(result, Invalid):
                counts["invalid"] += 1
                dead_rows.append((topic, msg.partition(), msg.offset(), kafka_ts, msg.key(),
                                  value, result.reason, result.detail[:1000]))  # fmt: skip
                continue
            key = result.natural_key
            if key in seen:  # the first copy in Kafka order won: a resend (or conflict)
                counts["resends"] += 1
                continue
            seen.add(key)
            delay_us = msg.timestamp()[1] * 1000 - _micros(result.happened_at)
            if delay_us > max_lateness_us:  # left to the batch layer, as the speed layer does
                counts["beyond"] += 1
                continue
            counts["receipts"] += 1
            late = delay_us > LATE_US
            qty, revenue = result.item_quantity, result.revenue
            items = [(i.title, i.price, i.amount) for i in result.line_items]
            raw_rows.append((result.operation_id, result.happened_at.date(), result.happened_at,
                             result.vendor_fiscal_module, result.transaction_id, items, qty,
                             revenue, msg.partition(), msg.offset(), kafka_ts, late))  # fmt: skip
            epoch = int(result.happened_at.timestamp())
            wkey = (result.operation_id, datetime.fromtimestamp(epoch - epoch % WINDOW_S, UTC))
            agg = windows.setdefault(wkey, [0, 0, Decimal("0.00"), 0])
            agg[0] += 1
            agg[1] += qty
            agg[2] += revenue
            agg[3] += 1 if late else 0
            touched.add(wkey)
        agg_rows = [(s, ws.date(), ws, *windows[(s, ws)]) for s, ws in touched]
        for stmt, rows in ((dead_stmt, dead_rows), (raw_stmt, raw_rows), (agg_stmt, agg_rows)):
            if rows:
                for ok, res in execute_concurrent_with_args(session, stmt, rows, concurrency=64):
                    if not ok:
                        raise RuntimeError(f"Cassandra write failed: {res}")
        if batch:
            consumer.commit(asynchronous=False)  # after the writes: at least once
    elapsed = time.perf_counter() - started if started is not None else 0.0
    ended_at = time.time()
    consumer.close()
    cluster.shutdown()
    rate = counts["messages"] / elapsed if elapsed else 0.0
    return {**counts, "seconds": round(elapsed, 3), "events_per_second": round(rate, 1),
            "started_at": started_at, "ended_at": ended_at}  # fmt: skip


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--keyspace", required=True, help="created with the views' tables")
    parser.add_argument("--ledger", type=Path, help="the producer's ledger to check against")
    args = parser.parse_args()
    settings = load_settings().with_overrides(
        **{"topic_transactions": args.topic, "cassandra_keyspace": args.keyspace}
    )
    schema_apply.apply_cql(settings, args.keyspace)
    result = consume(settings, args.keyspace, settings.speed.max_lateness_hours)
    if args.ledger is not None:
        problems = harness.check_ledger(settings, args.keyspace, args.ledger)
        result["exact"] = not problems
        result["problems"] = problems
    print(json.dumps(result, default=str))
    if result.get("exact") is False:
        sys.exit(1)


if __name__ == "__main__":
    main()
