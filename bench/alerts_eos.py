"""What exactly-once costs the alerts processor: transactional vs at-least-once, at
transaction (commit) intervals of 10 ms, 100 ms and 1 s, measured in one run.

    python bench/alerts_eos.py [--count 100000] [--rate 500] [--seconds 10]

Every configuration runs `pos-alerts run` as a separate process (as deployed), with a
threshold that makes every receipt an alert (one alert per input record: the produce
path is exercised as much as the commit path), on its own alert topic and group:

- throughput: `--count` receipts already in Kafka; alerts per second from the first alert
  produced (a read_uncommitted consumer sees it: start-up excluded) to the last one
  visible to a read_committed consumer (so the last transaction's commit counts, and
  the first one's wait is not left out);
- latency: receipts produced at `--rate` per second for `--seconds`; for each, the time
  from its produce (the record's CreateTime) to its alert being visible to a
  read_committed consumer: p50 and p99.

Throughput is the median of `--rounds` rounds over all configurations in turn (modes
alternating); latency one run each. Reported per interval with the ratios
exactly-once / at-least-once. The field's
anchor: about 3% throughput overhead at 100 ms transactions. Writes
docs/bench/alerts_eos.json (bench/results.py; --no-json: don't). Needs `make up`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import results as bench_results  # bench/, beside this script
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from pos_lambda.adapters import schema_apply
from pos_lambda.producer.kafka_sink import produce, producer_config
from pos_lambda.producer.simulation import OutgoingMessage, SimulationConfig, simulate
from pos_lambda.settings import Settings, load_settings

INTERVALS_MS = (10, 100, 1000)
MODES = ("exactly_once", "at_least_once")
BIN = Path(sys.executable).parent


@dataclass
class Result:
    mode: str
    interval_ms: int
    throughput: float = 0.0  # median of the rounds
    rounds: list[float] = field(default_factory=list)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    duplicates: int = 0


def _topic(settings: Settings, kind: str) -> str:
    name = f"bench.alerts.{kind}.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(settings, {name: settings.topics.partitions})
    return name


def _messages(count: int, seed: int) -> list[OutgoingMessage]:
    """Simulated receipts, stamped by the client when produced (CreateTime = now)."""
    sim = simulate(SimulationConfig(count=count, seed=seed, start=datetime(2026, 3, 2, tzinfo=UTC)))
    return [OutgoingMessage(m.key, m.value, 0, m.kind) for m in sim.messages]


def _start(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ) | settings.environment()
    return subprocess.Popen(
        [str(BIN / "pos-alerts"), "run"],
        env=env,
        stdout=open(log, "ab"),  # the child keeps it
        stderr=subprocess.STDOUT,
    )


class AlertReader:
    """A consumer of one alert topic (read_committed unless told), in a thread: when each
    alert became visible, and the CreateTime of the receipt that triggered it."""

    def __init__(self, settings: Settings, isolation: str = "read_committed") -> None:
        self.seen: list[tuple[float, int]] = []  # (wall clock s, source CreateTime ms)
        self.ids: set[bytes] = set()
        self.duplicates = 0
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": settings.bootstrap_servers,
                "group.id": f"bench-reader-{uuid.uuid4().hex}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                # Hand over what arrived without waiting for more: latency is measured here.
                "fetch.wait.max.ms": 5,
            }
        )
        md = self.consumer.list_topics(settings.topics.alerts, timeout=30)
        self.consumer.assign(
            [
                TopicPartition(settings.topics.alerts, p, OFFSET_BEGINNING)
                for p in md.topics[settings.topics.alerts].partitions
            ]
        )
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            # consume(n, timeout) would wait for n records or the whole timeout, and add
            # that wait to the latency: wait for the first one only, take what is there.
            first = self.consumer.poll(0.1)
            if first is None:
                continue
            now = time.time()
            for msg in [first, *self.consumer.consume(1000, timeout=0)]:
                key, value = msg.key(), msg.value()
                if msg.error() is not None or key is None or value is None:
                    continue
                if key in self.ids:
                    self.duplicates += 1
                    continue
                self.ids.add(key)
                source = json.loads(value)["source"]
                self.seen.append((now, int(source["timestamp_ms"])))

    def wait_for(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.seen) < n and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a counter another thread fills; not synchronisation
        return len(self.seen) >= n

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


def _config(base: Settings, mode: str, interval_ms: int, input_topic: str) -> Settings:
    return base.with_overrides(
        **{
            "topic_transactions": input_topic,
            "topic_alerts": _topic(base, "out"),
            "alerts_group_id": f"bench-alerts-{uuid.uuid4().hex[:8]}",
            "alerts_instance_id": f"bench-{uuid.uuid4().hex[:8]}",
            "alerts_mode": mode,
            "alerts_transaction_max_ms": interval_ms,
            "alerts_transaction_max_messages": 1_000_000,  # the interval decides
            "alerts_high_value_threshold": Decimal(-(10**9)),  # every receipt is an alert
        }
    )


def _throughput(s: Settings, count: int, log: Path) -> tuple[float, int]:
    reader, produced = AlertReader(s), AlertReader(s, "read_uncommitted")
    proc = _start(s, log)
    try:
        if not reader.wait_for(count, timeout=600):
            raise RuntimeError(f"only {len(reader.seen)} of {count} alerts; see {log}")
        first = min(t for t, _ in produced.seen)
        last = max(t for t, _ in reader.seen)
        return count / (last - first), reader.duplicates
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.close()
        produced.close()


def _latency(s: Settings, rate: int, seconds: int, log: Path) -> tuple[float, float]:
    reader = AlertReader(s)
    proc = _start(s, log)
    try:
        # One input producer, connected by the warm-up: a new one's first records wait
        # for its producer-id handshake (~0.5 s), which is not the processor's latency.
        producer = Producer(producer_config(s.bootstrap_servers))
        warm = _messages(1, seed=99)
        produce(warm, s.bootstrap_servers, s.topics.transactions, quiet=True, producer=producer)
        if not reader.wait_for(1, timeout=120):  # the processor is assigned and running
            raise RuntimeError(f"processor not running; see {log}")
        paced = _messages(rate * seconds, seed=7)
        produce(paced, s.bootstrap_servers, s.topics.transactions, rate=rate, quiet=True,
                producer=producer)  # fmt: skip
        if not reader.wait_for(1 + len(paced), timeout=120):
            raise RuntimeError(f"only {len(reader.seen)} alerts; see {log}")
        lat = sorted(seen * 1000 - created for seen, created in reader.seen[1:])
        return statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000, help="receipts, throughput runs")
    parser.add_argument("--rate", type=int, default=500, help="receipts/s, latency runs")
    parser.add_argument("--seconds", type=int, default=10, help="length of a latency run")
    parser.add_argument(
        "--rounds", type=int, default=3, help="throughput rounds (median; configurations alternate)"
    )
    bench_results.add_json_argument(parser, "alerts_eos")
    args = parser.parse_args()
    base = load_settings()
    log = Path(f"/tmp/bench-alerts-{uuid.uuid4().hex[:8]}.log")
    backlog = _topic(base, "in")
    messages = _messages(args.count, seed=1)
    produce(messages, base.bootstrap_servers, backlog, quiet=True)
    print(f"{len(messages)} receipts in {backlog}; processor logs in {log}")
    results = [Result(mode, interval) for interval in INTERVALS_MS for mode in MODES]
    # Rounds over every configuration in turn, modes alternating: drift on a shared
    # machine hits all of them; the median of the rounds is reported.
    for n in range(args.rounds):
        for r in results:
            s = _config(base, r.mode, r.interval_ms, backlog)
            throughput, duplicates = _throughput(s, len(messages), log)
            r.rounds.append(throughput)
            r.duplicates += duplicates
            print(f"round {n + 1}: {r.mode:<14} {r.interval_ms:>5} ms: {throughput:>8,.0f} "
                  f"alerts/s", flush=True)  # fmt: skip
    for r in results:
        r.throughput = statistics.median(r.rounds)
        s = _config(base, r.mode, r.interval_ms, _topic(base, "in"))
        r.p50_ms, r.p99_ms = _latency(s, args.rate, args.seconds, log)
        print(
            f"{r.mode:<14} {r.interval_ms:>5} ms: {r.throughput:>8,.0f} alerts/s (median of "
            f"{len(r.rounds)}), latency p50 {r.p50_ms:,.0f} ms, p99 {r.p99_ms:,.0f} ms, "
            f"duplicates {r.duplicates}",
            flush=True,
        )
    for interval in INTERVALS_MS:
        eos, alo = (next(r for r in results if (r.mode, r.interval_ms) == (m, interval))
                    for m in MODES)  # fmt: skip
        print(
            f"{interval:>5} ms: exactly-once/at-least-once throughput = "
            f"{eos.throughput / alo.throughput:.2f} ({1 - eos.throughput / alo.throughput:+.0%} "
            f"overhead), p50 {eos.p50_ms:,.0f} vs {alo.p50_ms:,.0f} ms, "
            f"p99 {eos.p99_ms:,.0f} vs {alo.p99_ms:,.0f} ms"
        )
    _write(args, results, len(messages))


def _write(args: argparse.Namespace, results: list[Result], count: int) -> None:
    """Per interval: EOS as a ratio to ALO (throughput, latency p50 and p99)."""
    # The field's anchor, as a reference line rather than a promise (see docs/alerts.md).
    anchor = bench_results.Goal(">=", 0.97, "the field: ~3 % overhead at 100 ms")
    figures = []
    for interval in INTERVALS_MS:
        eos, alo = (next(r for r in results if (r.mode, r.interval_ms) == (m, interval))
                    for m in MODES)  # fmt: skip
        at = f"{interval} ms"
        figures += [
            bench_results.vs_peer(
                f"EOS throughput, {at}", eos.throughput, "alerts/s",
                f"ALO throughput, {at}", alo.throughput, anchor if interval == 100 else None,
            ),
            bench_results.baseline(f"ALO throughput, {at}", alo.throughput, "alerts/s"),
            bench_results.vs_peer(
                f"EOS latency p50, {at}", eos.p50_ms, "ms", f"ALO latency p50, {at}", alo.p50_ms
            ),
            bench_results.vs_peer(
                f"EOS latency p99, {at}", eos.p99_ms, "ms", f"ALO latency p99, {at}", alo.p99_ms
            ),
        ]  # fmt: skip
    figures.sort(key=lambda f: f.goal is None)  # the anchored 100 ms ratio is the headline
    duplicates = sum(r.duplicates for r in results)
    bench_results.write(
        args,
        "alerts_eos",
        figures,
        runs=[dataclasses.asdict(r) for r in results],
        notes=f"EOS: exactly once (transactions), ALO: at least once. Throughput: {count:,} "
        f"receipts, median of {args.rounds} alternating round(s); latency: {args.rate} "
        f"receipts/s for {args.seconds} s, one run each. Duplicates in all runs: {duplicates}.",
    )


if __name__ == "__main__":
    main()
