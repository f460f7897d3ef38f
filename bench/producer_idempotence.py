"""Producer throughput with idempotence on and off, side by side in one run.

    python bench/producer_idempotence.py [--count 200000] [--rounds 3]

Generates the receipts once (the pure simulator is not what we measure), then
sends them to fresh topics alternating on/off per round, and reports events/s
per round, the medians and the on/off ratio. Needs Kafka (`make up`).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime

from infra import schema_apply
from infra.settings import load_settings
from producer.kafka_sink import produce
from producer.simulation import SimulationConfig, simulate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = load_settings()
    messages = simulate(
        SimulationConfig(count=args.count, seed=1, start=datetime(2026, 3, 2, tzinfo=UTC))
    ).messages
    rates: dict[bool, list[float]] = {True: [], False: []}
    for rnd in range(args.rounds):
        for idempotence in (True, False):
            topic = f"bench.producer.{uuid.uuid4().hex[:8]}"
            schema_apply.create_topics(settings, {topic: settings.topic_partitions})
            t0 = time.perf_counter()
            produce(
                messages, settings.bootstrap_servers, topic, idempotence=idempotence, quiet=True
            )
            rate = len(messages) / (time.perf_counter() - t0)
            rates[idempotence].append(rate)
            print(
                f"round {rnd + 1}: idempotence={'on ' if idempotence else 'off'} "
                f"{rate:,.0f} events/s"
            )
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median: on {on:,.0f} events/s, off {off:,.0f} events/s, on/off = {on / off:.2f}")


if __name__ == "__main__":
    main()
