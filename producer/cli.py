"""`pos-producer`: simulate POS receipts into Kafka, or replay a JSONL file.

    pos-producer simulate --count 10000 --seed 7 --ledger ledger/ --resend-rate 0.006
    pos-producer simulate --count 100 --output messages.jsonl      # no Kafka
    pos-producer replay messages.jsonl                              # your own data

`simulate` sends N unique receipts (resends and malformed messages come on top),
writes the ground-truth ledger and prints a summary of what it injected. Every
fault knob is off by default. Kafka endpoint and topic default to the POS_* settings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from infra.settings import load_settings
from producer import ledger
from producer.kafka_sink import ProducerError, check_topic, produce
from producer.simulation import FaultConfig, OutgoingMessage, SimulationConfig, simulate
from schemas.contract import Receipt, parse_message


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text}")
    return value


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not an ISO-8601 timestamp with offset (e.g. 2026-03-02T08:00:00+00:00): {text}"
        ) from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"add a UTC offset, e.g. {text}+00:00")
    return value


def _kafka_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", help="target topic (default: POS_TOPIC_TRANSACTIONS)")
    p.add_argument("--bootstrap-servers", help="Kafka (default: POS_KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument(
        "--rate",
        type=_non_negative,
        default=0.0,
        help="messages per second; 0 = as fast as possible (default)",
    )
    p.add_argument(
        "--no-idempotence",
        action="store_true",
        help="turn the idempotent producer off (benchmarks only)",
    )
    p.add_argument("--create-topic", action="store_true", help="create the topic if missing")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-producer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="simulate stores and devices producing receipts")
    sim.add_argument("--count", type=_positive_int, required=True, help="unique receipts N")
    sim.add_argument("--seed", type=int, default=1, help="random seed (same seed, same stream)")
    sim.add_argument(
        "--start",
        type=_timestamp,
        help="simulated start, ISO-8601 with offset (default: now, to the minute)",
    )
    sim.add_argument("--stores", type=_positive_int, default=20, help="number of stores")
    sim.add_argument("--ledger", type=Path, help="directory for the ground-truth ledger")
    sim.add_argument(
        "--output", type=Path, help="write messages to this JSONL file instead of Kafka"
    )
    faults = sim.add_argument_group("fault injection (all off by default)")
    faults.add_argument(
        "--resend-rate",
        type=_rate,
        default=0.0,
        help="application-level resends of the same receipt (realistic: 0.006)",
    )
    faults.add_argument(
        "--burst-rate",
        type=_rate,
        default=0.0,
        help="receipts that start a same-second burst in their store",
    )
    faults.add_argument("--late-rate", type=_rate, default=0.0, help="late deliveries")
    faults.add_argument(
        "--late-max-delay",
        type=_non_negative,
        default=6 * 3600.0,
        help="longest delay of a late receipt, seconds (default 21600)",
    )
    faults.add_argument(
        "--out-of-order-rate",
        type=_rate,
        default=0.0,
        help="device receipts delivered after their successor",
    )
    faults.add_argument(
        "--clock-skew-max",
        type=_non_negative,
        default=0.0,
        help="per-device clock skew drawn from +-this many seconds",
    )
    faults.add_argument(
        "--malformed-rate",
        type=_rate,
        default=0.0,
        help="malformed messages (broken JSON, missing fields, wrong types, "
        "negative prices, oversized lists)",
    )
    _kafka_args(sim)
    rep = sub.add_parser("replay", help="send a JSONL file's lines as messages, as-is")
    rep.add_argument("file", type=Path, help="one message per line; blank lines are skipped")
    _kafka_args(rep)
    return parser


def _replay_messages(path: Path) -> Iterator[OutgoingMessage]:
    with open(path, "rb") as lines:
        for line in lines:
            value = line.rstrip(b"\r\n")
            if not value.strip():
                continue
            parsed = parse_message(value)
            key = (
                f"{parsed.operation_id}:{parsed.vendor_fiscal_module}".encode()
                if isinstance(parsed, Receipt)
                else None
            )
            yield OutgoingMessage(key, value, 0, "replay")


def _send(
    args: argparse.Namespace,
    messages: Iterator[OutgoingMessage] | list[OutgoingMessage],
    total: int | None,
) -> tuple[str, float]:
    settings = load_settings()
    bootstrap = args.bootstrap_servers or settings.bootstrap_servers
    topic = args.topic or settings.topic_transactions
    check_topic(bootstrap, topic, settings.topic_partitions if args.create_topic else None)
    t0 = time.monotonic()
    stats = produce(
        messages,
        bootstrap,
        topic,
        idempotence=not args.no_idempotence,
        rate=args.rate,
        total=total,
        quiet=args.quiet,
    )
    took = time.monotonic() - t0
    print(
        f"sent {stats.acked} messages to {topic} in {took:.1f}s "
        f"({stats.acked / max(took, 1e-9):.0f} msg/s)",
        file=sys.stderr,
    )
    return topic, took


def cmd_simulate(args: argparse.Namespace) -> int:
    start = args.start or datetime.now(UTC).replace(second=0, microsecond=0)
    config = SimulationConfig(
        count=args.count, seed=args.seed, start=start, stores=args.stores,
        faults=FaultConfig(
            resend_rate=args.resend_rate, burst_rate=args.burst_rate, late_rate=args.late_rate,
            late_max_delay_s=args.late_max_delay, out_of_order_rate=args.out_of_order_rate,
            clock_skew_max_s=args.clock_skew_max, malformed_rate=args.malformed_rate,
        ),
    )  # fmt: skip
    result = simulate(config)
    summary = dict(result.summary)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_bytes(b"".join(m.value + b"\n" for m in result.messages))
        summary["output"] = str(args.output)
    else:
        summary["topic"], _ = _send(args, result.messages, len(result.messages))
    if args.ledger:
        ledger.write(args.ledger, result.receipts, result.faults, summary)
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "unique_receipts",
                    "messages",
                    "late_receipts",
                    "faults",
                    "malformed_kinds",
                )
            },
            indent=2,
        )
    )
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        print(f"error: no such file: {args.file}", file=sys.stderr)
        return 2
    _send(args, _replay_messages(args.file), None)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return cmd_simulate(args) if args.command == "simulate" else cmd_replay(args)
    except ProducerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
