"""`pos-audit`: compare every view with the producer's ledger; exit non-zero on a loss.

    pos-audit --ledger .state/demo-ledger                  # table on stdout
    pos-audit --ledger DIR --json audit.json               # + the JSON report
    pos-audit --ledger DIR --views dead_letters,alerts_topic
    make audit LEDGER=DIR

Views: receipts_by_store_day, receipt_keys, agg_15m_speed (speed: exact once the speed
layer has read the ledger's topic to its end, within its lateness bound),
receipts_batch, agg_15m_batch (exact up to the committed horizon), serving_windows and
serving_receipts (the merged answers: exact), conflicts, dead_letters, alerts_topic, alerts_table
(skipped when the alerts processor / sink never ran, unless named with --views),
receipts_topic (pos.receipts: every receipt once, the winner's content; skipped when
`pos-receipts run` never ran, unless named with --views).
Keyspace, topics, thresholds and the speed bound come from the POS_* settings the
pipeline ran with (`python -m pos_lambda.settings`); the input topic from the ledger.

Exit codes: 0 every exact view equals the ledger; 1 a discrepancy in an exact view (or
a view named with --views could not be checked); 2 could not audit (bad arguments, a
piece of evidence missing: the ledger's files, a ledger without messages, the speed
layer's checkpoint under POS_DATA_DIR, the ledger's topic; Kafka or Cassandra
unreachable): the message says which, and never a verdict without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pos_lambda.adapters.service import ServiceError
from pos_lambda.audit.readers import AuditError
from pos_lambda.audit.run import VIEWS, audit
from pos_lambda.settings import load_settings


def _views(text: str) -> list[str]:
    names = [n.strip() for n in text.replace(" ", ",").split(",") if n.strip()]
    unknown = [n for n in names if n not in VIEWS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown view(s) {', '.join(unknown) or '(none given)'}; choose from "
            + ", ".join(VIEWS)
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-audit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ledger", type=Path, required=True,
        help="ledger directory written by `pos-producer simulate --ledger DIR`",
    )  # fmt: skip
    p.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    p.add_argument(
        "--views", type=_views, action="extend",
        help="comma-separated views to audit (default: all); repeatable",
    )  # fmt: skip
    p.add_argument("--keyspace", help="Cassandra keyspace (default: POS_CASSANDRA_KEYSPACE)")
    p.add_argument("--examples", type=int, default=3, help="examples per view in the table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # bad usage: argparse exits 2
    try:
        settings = load_settings(cassandra_keyspace=args.keyspace)
        report = audit(settings, args.ledger, args.views, None if args.quiet else _progress)
    except (AuditError, ServiceError) as exc:
        print(f"pos-audit: could not audit: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(report.table(args.examples))
    _record_last(settings.state_dir / "audit" / "last.json", report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.dumps())
        print(f"JSON report: {args.json}", file=sys.stderr)
    return report.exit_code


def _record_last(path: Path, report: Any) -> None:
    """The verdict where the serving process's /metrics finds it (serving/metrics.py):
    the last audit run on this machine, whatever its ledger. Best effort: the verdict
    is printed and in the exit code whatever happens here."""
    from datetime import UTC, datetime

    record = {
        "finished_at": datetime.now(UTC).isoformat(),
        "exit_code": report.exit_code,
        **report.to_json(),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, default=str) + "\n")
        tmp.replace(path)
    except OSError as exc:
        print(f"pos-audit: could not record the verdict in {path}: {exc}", file=sys.stderr)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
