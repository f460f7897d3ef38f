"""`pos-producer`: simulate POS receipts into Kafka, or replay a JSONL file.

    pos-producer simulate --count 10000 --seed 7 --ledger ledger/ --resend-rate 0.006
    pos-producer simulate --count 100 --output messages.jsonl      # to a file, no Kafka
    pos-producer simulate --count 100 --ledger ledger/ --dry-run   # ledger only
    pos-producer replay messages.jsonl                              # your own data

`simulate` sends N unique receipts (resends and malformed messages come on top),
writes the ground-truth ledger (receipts.jsonl, faults.jsonl, summary.json) and
prints the summary of what it injected as JSON on stdout; progress goes to stderr.
Every fault knob is off by default. Kafka endpoint and topic default to the POS_*
settings (`python -m pos_lambda.settings`); --bootstrap-servers and --topic override them.
Exit codes: 0 ok, 1 Kafka/delivery error, 2 bad arguments, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pos_lambda import cli_args
from pos_lambda.producer import ledger
from pos_lambda.producer.kafka_sink import ProducerError, check_topic, produce
from pos_lambda.producer.simulation import (
    REALISTIC_RESEND_RATE,
    FaultConfig,
    OutgoingMessage,
    SimulationConfig,
    simulate,
    store_hours_record,
)
from pos_lambda.schemas.contract import Receipt, parse_message
from pos_lambda.settings import Settings, load_settings
from pos_lambda.stores.model import Store
from pos_lambda.stores.registry import StoreRegistry


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
        type=cli_args.non_negative,
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
    sim.add_argument("--count", type=cli_args.positive_int, required=True, help="unique receipts N")
    sim.add_argument("--seed", type=int, default=1, help="random seed (same seed, same stream)")
    sim.add_argument(
        "--start",
        type=_timestamp,
        help="simulated start, ISO-8601 with offset (default: now, to the minute)",
    )
    sim.add_argument("--stores", type=cli_args.positive_int, default=20, help="number of stores")
    sim.add_argument(
        "--mean-gap",
        type=cli_args.non_negative,
        default=2.0,
        help="mean simulated seconds between receipts at peak traffic (default 2); larger "
        "spreads --count receipts over more simulated days",
    )
    sim.add_argument("--ledger", type=Path, help="directory for the ground-truth ledger")
    sim.add_argument(
        "--store-hours",
        action="store_true",
        help="stores as data: IANA zones and opening hours (catalog.STORE_CATALOG), traffic "
        "only while each store is open by its local clock (DST included), each receipt's "
        "local day in the ledger; stores missing from the `stores` table are added to it "
        "before sending (not with --dry-run or --output)",
    )
    sim.add_argument(
        "--output", type=Path, help="write messages to this JSONL file instead of Kafka"
    )
    faults = sim.add_argument_group("fault injection (all off by default)")
    faults.add_argument(
        "--resend-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of receipts the terminal sends twice, same bytes, 1-30 s later "
        f"(realistic: {REALISTIC_RESEND_RATE})",
    )
    faults.add_argument(
        "--burst-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of arrivals that bring 1-3 more receipts of the same store "
        "in the same second",
    )
    faults.add_argument(
        "--late-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of receipts sent more than 15 min after they happened",
    )
    faults.add_argument(
        "--late-max-delay",
        type=cli_args.non_negative,
        default=6 * 3600.0,
        help="longest delay of a late receipt, seconds; must exceed the contract's "
        "LATE_THRESHOLD of 900 s (default 21600; delays are log-uniform, so some are hours)",
    )
    faults.add_argument(
        "--out-of-order-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of receipts held back until just after their device's next one",
    )
    faults.add_argument(
        "--clock-skew-max",
        type=cli_args.non_negative,
        default=0.0,
        help="per-device fixed clock skew of happened_at, drawn from +-this many seconds",
    )
    faults.add_argument(
        "--malformed-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of receipts followed by a malformed message (broken JSON, missing "
        "fields, wrong types, negative prices, oversized lists), on top of --count",
    )
    faults.add_argument(
        "--lost-at-source-rate",
        type=cli_args.fraction,
        default=0.0,
        help="fraction of receipts the tills issue (and number) but never send: recorded "
        "in the ledger as lost at the source; the gaps view shows their numbers missing",
    )
    sim.add_argument(
        "--dry-run",
        action="store_true",
        help="simulate, write the ledger and print the summary, but send nothing",
    )
    _kafka_args(sim)
    sim.set_defaults(handler=cmd_simulate, subparser=sim)
    rep = sub.add_parser("replay", help="send a JSONL file's lines as messages, as-is")
    rep.add_argument("file", type=Path, help="one message per line; blank lines are skipped")
    _kafka_args(rep)
    rep.set_defaults(handler=cmd_replay, subparser=rep)
    return parser


def _replay_messages(path: Path) -> Iterator[OutgoingMessage]:
    """Each non-blank line, as-is; keyed by device when it is a valid receipt."""
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


def _settings(args: argparse.Namespace) -> Settings:
    # Flags override the POS_* environment; built once here, passed down.
    return load_settings(
        kafka_bootstrap_servers=args.bootstrap_servers, topic_transactions=args.topic
    )


def _check(args: argparse.Namespace, settings: Settings) -> None:
    check_topic(
        settings.bootstrap_servers,
        settings.topics.transactions,
        settings.topics.partitions if args.create_topic else None,
        settings.topics.replication_factor,
        security=settings.kafka.security_config,
    )


def _send(
    args: argparse.Namespace,
    settings: Settings,
    messages: Iterable[OutgoingMessage],
    total: int | None,
) -> dict[str, Any]:
    """Produce, print a one-line result to stderr and return the delivery report."""
    t0 = time.monotonic()
    stats = produce(
        messages,
        settings.bootstrap_servers,
        settings.topics.transactions,
        idempotence=not args.no_idempotence,
        rate=args.rate,
        total=total,
        quiet=args.quiet,
        security=settings.kafka.security_config,
    )
    took = time.monotonic() - t0
    print(
        f"sent {stats.acked} messages to {settings.topics.transactions} in {took:.1f}s "
        f"({stats.acked / max(took, 1e-9):.0f} msg/s)",
        file=sys.stderr,
    )
    return {"status": "complete", "acked": stats.acked, "seconds": round(took, 3)}


def _fault_config(args: argparse.Namespace) -> FaultConfig:
    return FaultConfig(
        resend_rate=args.resend_rate, burst_rate=args.burst_rate, late_rate=args.late_rate,
        late_max_delay_s=args.late_max_delay, out_of_order_rate=args.out_of_order_rate,
        clock_skew_max_s=args.clock_skew_max, malformed_rate=args.malformed_rate,
        lost_at_source_rate=args.lost_at_source_rate,
    )  # fmt: skip


def seed_stores(registry: StoreRegistry, stores: list[Store]) -> list[Store]:
    """Add the simulated stores the registry lacks; keep the ones it has (an operator's
    edits win), and say so when one differs from the simulator's: its ledger's local
    days follow the simulator's zone, its silence alerts the table's hours. Returns the
    stores as the table holds them now (what the ledger records for the auditor)."""
    registered = []
    for store in stores:
        known = registry.get(store.operation_id)
        if known is None:
            registry.put(store)
            known = store
        elif (known.time_zone, known.hours) != (store.time_zone, store.hours):
            print(
                f"warning: store {store.operation_id} is registered in {known.time_zone} "
                f"with its own hours; the simulator (and its ledger's local days) uses "
                f"{store.time_zone}, the ledger records the table's hours for the alerts",
                file=sys.stderr,
            )
        registered.append(known)
    return registered


def _seed_stores(settings: Settings, stores: list[Store]) -> list[Store]:
    from pos_lambda.stores.registry import CassandraStores, RegistryUnavailable

    registry = CassandraStores(settings)
    try:
        return seed_stores(registry, stores)
    except RegistryUnavailable as exc:
        raise ProducerError(f"cannot seed the stores table: {exc}") from None
    finally:
        registry.close()


def cmd_simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    start = args.start or datetime.now(UTC).replace(second=0, microsecond=0)
    try:
        config = SimulationConfig(
            count=args.count, seed=args.seed, start=start, stores=args.stores,
            mean_gap_s=args.mean_gap, faults=_fault_config(args), store_hours=args.store_hours,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    to_kafka = not (args.dry_run or args.output)
    settings = _settings(args)
    if to_kafka:  # fail fast, before writing a ledger for a stream that cannot be sent
        _check(args, settings)
    result = simulate(config)
    summary = dict(result.summary)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_bytes(b"".join(m.value + b"\n" for m in result.messages))
        summary["output"] = str(args.output)
    if to_kafka and result.stores:
        summary["store_hours"] = store_hours_record(_seed_stores(settings, result.stores))
    if to_kafka:
        summary["topic"] = settings.topics.transactions
        summary["delivery"] = {"status": "sending"}
    if args.ledger:
        # Written before sending: a producer killed mid-run still leaves the truth
        # of what it meant to send, and the summary says how far it got.
        ledger.write(args.ledger, result.receipts, result.faults, summary)
    if to_kafka:
        try:
            summary["delivery"] = _send(args, settings, result.messages, len(result.messages))
        except (ProducerError, KeyboardInterrupt) as exc:
            failed = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            summary["delivery"] = {"status": failed, "error": str(exc)}
            raise
        finally:
            if args.ledger:
                ledger.write_summary(args.ledger, summary)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_replay(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if not args.file.is_file():
        parser.error(f"no such file: {args.file}")
    settings = _settings(args)
    _check(args, settings)
    _send(args, settings, _replay_messages(args.file), None)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args, args.subparser)
        return code
    except ProducerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
