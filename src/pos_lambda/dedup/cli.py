"""`pos-receipts`: the deduplicated topic, one record per receipt, exactly once.

    pos-receipts run                         # instance 1 of group pos-receipts (make receipts)
    pos-receipts run --instance-id 2         # another instance: the group shares the partitions

`run` reads POS_TOPIC_TRANSACTIONS and writes each receipt's winner, once, to
POS_TOPIC_RECEIPTS (pos.receipts; record key `operation_id:vendor_fiscal_module:
transaction_id`, value the winner's message as sent; src/pos_lambda/dedup/step.py) in
Kafka transactions that also commit its input offsets (the shell of
src/pos_lambda/transactional/processor.py). Read it with isolation.level=read_committed.
Settings: POS_RECEIPTS_* (`python -m pos_lambda.settings`); flags override them. Keep each
running instance's id unique and stable: a restarted instance with the same id fences
its predecessor, and an instance refuses to start while another live one holds its id (a
lease in Cassandra; after a crash the restart waits at most POS_RECEIPTS_LEASE_TTL_S).
SIGTERM/Ctrl-C commit (or abort) the open transaction and exit.

Exit codes: 0 stopped on request, 1 Kafka/Cassandra unreachable or a topic missing,
2 bad arguments or settings, 3 a fatal Kafka error, 4 fenced by a newer instance with
the same id, 5 another live instance holds this id (not started), 6 a Kafka call hung
again after POS_RECEIPTS_MAX_RESTARTS_IN_PLACE in-place restarts in a row.
"""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from pos_lambda.settings import Settings, load_settings
from pos_lambda.transactional.run import (
    add_run_arguments,
    configuration_error,
    run_instance,
    run_overrides,
    start_logging,
    stop_on_signals,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pos-receipts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser(
        "run",
        help="run one processor instance (until SIGTERM/Ctrl-C)",
        description="Run one instance of the deduplicated topic's processor until SIGTERM/Ctrl-C.",
    )
    add_run_arguments(run_p, "receipts")
    run_p.add_argument("--output-topic", help="POS_TOPIC_RECEIPTS")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(**run_overrides(args, "receipts"), topic_receipts=args.output_topic)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_logging()
    try:
        settings = _settings(args)
    except (ValidationError, ValueError) as exc:  # a bad flag or POS_* value
        return configuration_error(exc)
    from pos_lambda.dedup.processor import job, processor

    return run_instance(
        settings,
        job(settings),
        lambda lease: processor(settings, lease),
        stop_on_signals(),
        "Receipts (winners) in committed transactions.",
    )


if __name__ == "__main__":
    sys.exit(main())
