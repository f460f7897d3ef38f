"""The speed benchmarks' shared input: one fresh topic of simulated receipts with faults.

Resends, malformed messages, late receipts (up to 2 h) and same-second bursts at the
rates a busy store chain shows, from a fixed seed and start, so every benchmark that
uses it measures the same kind of stream (bench/speed_backlog.py, bench/speed_vs_plain.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pos_lambda.adapters import schema_apply
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, SimulationResult, simulate
from pos_lambda.settings import Settings

FAULTS = FaultConfig(
    resend_rate=0.006, malformed_rate=0.005, late_rate=0.02, late_max_delay_s=7200,
    burst_rate=0.02,
)  # fmt: skip
START = datetime(2026, 3, 2, 8, tzinfo=UTC)


def produce_faulted_topic(
    base: Settings, prefix: str, count: int, seed: int = 3
) -> tuple[Settings, SimulationResult]:
    """Simulate `count` receipts with FAULTS into a new topic `<prefix>.<random>`.

    Returns the settings pointed at that topic, and the simulation (messages, ledger).
    """
    topic = f"{prefix}.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(base, {topic: base.topics.partitions})
    result = simulate(SimulationConfig(count=count, seed=seed, faults=FAULTS, start=START))
    produce(result.messages, base.bootstrap_servers, topic, quiet=True)
    return base.with_overrides(**{"topic_transactions": topic}), result
