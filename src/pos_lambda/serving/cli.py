"""`pos-serve`: the serving layer's command line (the same library as the HTTP API).

    pos-serve windows --store 101 --start 2026-03-02T00:00Z --end 2026-03-03T00:00Z
    pos-serve days --store 101 --first 2026-03-01 --last 2026-03-02
    pos-serve local-days --store 102 --first 2026-03-08 --last 2026-03-09  # store's zone
    pos-serve hour-of-week --store 102 --first 2026-02-02 --last 2026-03-01  # local hours
    pos-serve week-before --store 102 --day 2026-03-09 [--until 14:30]  # vs a week before
    pos-serve top --day 2026-03-02 [--limit 10]
    pos-serve receipts --store 101 --day 2026-03-02 [--page-size 50] [--page TOKEN]
    pos-serve issues --store 101 --day 2026-03-02 [--page-size 50] [--page TOKEN]
                                                  # conflicts (paged) + what the batch fixed
    pos-serve receipts --store 102 --day 2026-03-09 --local   # the store's local day
    pos-serve receipt --store 101 --device 7 --transaction 42   # did it arrive? [--json]
    pos-serve health [--runs 5]
    pos-serve cookbook [--store 101 --day 2026-03-02 --zone Europe/Bratislava]  # CQL
    pos-serve http [--port 8000]                      # HTTP API + dashboard (make serve)

Every query takes `--format table|json` (or `--json`: JSON as the HTTP API answers it).
Exit codes: 0 done, 2 bad arguments (or a broken stores row), 3 unknown store or receipt, 4
Cassandra unreachable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from pos_lambda.serving import cookbook
from pos_lambda.serving.errors import BrokenStore, QueryError, Unavailable, UnknownStore
from pos_lambda.serving.gaps import GapsAnswer
from pos_lambda.serving.local_days import parse_until
from pos_lambda.serving.local_week import DayComparison, HourCell, HourOfWeek
from pos_lambda.serving.output import table, to_json
from pos_lambda.serving.receipt_status import ReceiptStatus
from pos_lambda.serving.requests import parse_day, parse_instant
from pos_lambda.settings import Settings, load_settings

EXIT_BAD_INPUT, EXIT_UNKNOWN_STORE, EXIT_UNAVAILABLE = 2, 3, 4
EXIT_UNKNOWN_RECEIPT = EXIT_UNKNOWN_STORE  # "unknown" either way: a script resends on it


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=text, description=text)
        c.add_argument("--format", choices=("table", "json"), default="table")
        c.add_argument(
            "--json", dest="format", action="store_const", const="json", help="--format json"
        )
        return c

    def local_range(c: argparse.ArgumentParser) -> None:
        c.add_argument("--store", type=int, required=True)
        c.add_argument("--first", required=True, help="first local day, YYYY-MM-DD")
        c.add_argument("--last", required=True, help="last local day, YYYY-MM-DD")

    c = command("windows", "a store's 15-minute windows of [start, end), merged, with source")
    c.add_argument("--store", type=int, required=True, help="operation_id")
    c.add_argument("--start", required=True, help="e.g. 2026-03-02T00:00Z or 2026-03-02")
    c.add_argument("--end", required=True, help="exclusive, e.g. 2026-03-03")
    c = command("days", "a store's daily totals, first..last (both included)")
    c.add_argument("--store", type=int, required=True)
    c.add_argument("--first", required=True, help="first UTC day, YYYY-MM-DD")
    c.add_argument("--last", required=True, help="last UTC day, YYYY-MM-DD")
    c = command("local-days", "a store's totals per local day, in its registered zone")
    local_range(c)
    c = command(
        "hour-of-week",
        "a store's local days summed per local weekday x hour (the week's heatmap)",
    )
    local_range(c)
    c = command("week-before", "a store's local day against the same weekday a week before")
    c.add_argument("--store", type=int, required=True)
    c.add_argument("--day", required=True, help="local day, YYYY-MM-DD")
    c.add_argument(
        "--until",
        default=None,
        help="both days only up to this local time, HH:MM on a 15-minute boundary (a day "
        "in progress against the same hours a week before); default: whole days",
    )
    c = command("top", "the day's stores by merged revenue")
    c.add_argument("--day", required=True, help="UTC day, YYYY-MM-DD")
    c.add_argument("--limit", type=int, default=10)

    def store_day(c: argparse.ArgumentParser) -> None:
        c.add_argument("--store", type=int, required=True)
        c.add_argument("--day", required=True, help="UTC day (local day with --local)")
        c.add_argument(
            "--local",
            action="store_true",
            help="the store's local day, in the zone the store registry gives it",
        )

    c = command("receipts", "a page of a store-day's raw receipts, in time order")
    store_day(c)
    c.add_argument("--page-size", type=int, default=None, help="default POS_SERVE_PAGE_SIZE")
    c.add_argument("--page", default=None, help="next_page token of the previous page")
    c = command("issues", "conflicting copies of a store-day's receipts and the batch's fixes")
    store_day(c)
    c.add_argument("--page-size", type=int, default=None, help="default POS_SERVE_PAGE_SIZE")
    c.add_argument("--page", default=None, help="next_page token of the previous page")
    c = command(
        "receipt",
        "did the pipeline get a receipt? accepted, resend_absorbed, conflict, dead_letter "
        "or unknown (exit code 3)",
    )
    c.add_argument("--store", type=int, required=True, help="operation_id")
    c.add_argument("--device", type=int, required=True, help="vendor_fiscal_module")
    c.add_argument("--transaction", type=int, required=True, help="transaction_id")
    c = command(
        "gaps",
        "did we get every receipt? each device's numbers of a store's UTC day and the "
        "ranges missing from them (final once the batch covers the day)",
    )
    c.add_argument("--store", type=int, required=True, help="operation_id")
    c.add_argument("--day", required=True, help="UTC day, YYYY-MM-DD")
    c = command("health", "batch horizon and age, last runs, speed progress, dead letters")
    c.add_argument("--runs", type=int, default=5, help="batch runs to show")
    c = sub.add_parser(
        "cookbook",
        help="print the CQL (cqlsh) query for each view",
        description="print the CQL (cqlsh) query for each view, for your keyspace",
    )
    for name, default in cookbook.EXAMPLE.items():
        if name != "keyspace":
            c.add_argument(f"--{name}", default=default, help=f"default {default}")
    c = sub.add_parser(
        "http",
        help="serve the HTTP API and the dashboard on 127.0.0.1 (make serve)",
        description="serve the HTTP API (docs at /docs) and the dashboard (/) with uvicorn",
    )
    c.add_argument("--port", type=int, default=None, help="default POS_SERVE_PORT (8000)")
    return p


def _show(args: argparse.Namespace, settings: Settings) -> str:
    from pos_lambda.serving.service import Serving

    with Serving(settings) as lib:
        answer, render = _query(args, lib)
    shown = to_json(answer) if args.format == "json" else render()
    if isinstance(answer, ReceiptStatus) and answer.status == "unknown":
        raise UnknownReceipt(shown)  # printed, then exit code 3, as for an unknown store
    return shown


@dataclass(frozen=True)
class _TillRow:
    till: int
    first: int
    last: int
    receipts: int
    missing: str
    restarts: str


def _gaps_text(gaps: GapsAnswer) -> str:
    rows = [
        _TillRow(
            d.device,
            d.first,
            d.last,
            d.receipts,
            ", ".join(f"{m.text()} ({m.status})" for m in d.missing) or "-",
            ", ".join(map(str, d.restarts)) or "-",
        )
        for d in gaps.devices
    ]
    return f"{gaps.line()}\n{table(rows)}" if rows else gaps.line()


def _query(args: argparse.Namespace, lib: Any) -> tuple[Any, Callable[[], str]]:
    c = args.command
    if c == "windows":
        a = lib.windows(
            args.store, parse_instant(args.start, "start"), parse_instant(args.end, "end")
        )
        cols = ["window_start", "receipt_count", "item_quantity", "revenue", "late_count",
                "source", "final"]  # fmt: skip
        t = a.totals
        return (
            a,
            lambda: (
                f"store {a.operation_id}, horizon {a.horizon or 'none'}\n{table(a.windows, cols)}\n"
                f"total: {t.receipt_count} receipts, {t.item_quantity} items, revenue {t.revenue}, "
                f"{t.late_count} late; {t.batch_windows} windows from batch, "
                f"{t.speed_windows} from speed"
            ),
        )
    if c == "days":
        rows = lib.daily_totals(
            args.store, parse_day(args.first, "first"), parse_day(args.last, "last")
        )
        return rows, lambda: table(rows)
    if c == "local-days":
        local = lib.local_days(
            args.store, parse_day(args.first, "first"), parse_day(args.last, "last")
        )
        cols = ["day", "start", "end", "windows", "receipt_count", "item_quantity", "revenue",
                "late_count", "batch_windows", "speed_windows", "final"]  # fmt: skip
        return (
            local,
            lambda: (
                f"store {local.operation_id} ({local.name}), {local.time_zone}, "
                f"horizon {local.horizon or 'none'}\n{table(local.days, cols)}"
            ),
        )
    if c == "hour-of-week":
        week = lib.hour_of_week(
            args.store, parse_day(args.first, "first"), parse_day(args.last, "last")
        )
        return week, lambda: _hour_of_week_text(week)
    if c == "week-before":
        cut = parse_until(args.until) if args.until is not None else None
        cmp = lib.compare_week_before(args.store, parse_day(args.day), cut)
        return cmp, lambda: _week_before_text(cmp)
    if c == "top":
        top = lib.top_stores(parse_day(args.day), args.limit)
        return top, lambda: f"{top.day}, horizon {top.horizon or 'none'}\n{table(top.stores)}"
    if c == "gaps":
        gaps = lib.gaps(args.store, parse_day(args.day))
        return gaps, lambda: _gaps_text(gaps)
    if c == "receipts":
        listing = lib.local_receipts if args.local else lib.receipts
        page = listing(args.store, parse_day(args.day), args.page_size, args.page)
        cols = ["happened_at", "vendor_fiscal_module", "transaction_id", "item_quantity",
                "revenue", "late", "source"]  # fmt: skip
        return (
            page,
            lambda: (
                f"store {page.operation_id}, {_day_text(page.day, page.time_zone)}: "
                f"[{page.start.isoformat()}, {page.end.isoformat()})\n"
                + table(page.receipts, cols)
                + f"\nnext page: {page.next_page or '(none: the last)'}"
            ),
        )
    if c == "issues":
        issues = lib.local_store_day if args.local else lib.store_day
        sd = issues(args.store, parse_day(args.day), args.page_size, args.page)
        return sd, lambda: (
            f"store {sd.operation_id}, {_day_text(sd.day, sd.time_zone)}\n"
            f"conflicts\n{table(sd.conflicts)}\n\nbatch fixes\n"
            + table(sd.fixes, ["window_start", "speed_receipts", "batch_receipts",
                               "receipts_fixed", "revenue_fixed", "duplicates", "conflicts"])
            + f"\nnext page: {sd.next_page or '(none: the last)'}"
        )  # fmt: skip
    if c == "receipt":
        r = lib.receipt_status(args.store, args.device, args.transaction)
        return r, lambda: _receipt_text(r)
    h = lib.health(args.runs)
    return h, lambda: "\n".join(
        [
            f"batch horizon: {h.horizon or 'none'} (age {h.horizon_age_seconds} s)",
            "last batch runs:",
            table(h.batch_runs, ["run_id", "status", "interval_start", "interval_end",
                                 "receipts", "duplicates_removed", "conflicts", "finished_at"]),
            "speed layer:",
            table(h.speed),
            f"dead letters: {h.dead_letters.total}"
            + ("+ (scan limit reached)" if h.dead_letters.truncated else "")
            + f" {h.dead_letters.by_reason}",
        ]
    )  # fmt: skip


def _grid(week: HourOfWeek, value: Callable[[HourCell], str]) -> str:
    """7 rows (mon..sun) x 24 local hours, right-aligned."""
    rows = [["", *(f"{h:02d}" for h in range(24))]]
    for day in range(7):
        cells = week.cells[day * 24 : (day + 1) * 24]
        rows.append([cells[0].weekday_name, *(value(c) for c in cells)])
    width = max(len(v) for r in rows for v in r)
    return "\n".join(" ".join(v.rjust(width) for v in r) for r in rows)


def _hour_of_week_text(week: HourOfWeek) -> str:
    t = week.totals
    return "\n".join(
        [
            f"store {week.operation_id} ({week.name}), {week.time_zone}, local days "
            f"{week.first}..{week.last}, horizon {week.horizon or 'none'}"
            + ("" if week.final else " (not final: speed windows included)"),
            "receipts by local weekday and hour:",
            _grid(week, lambda c: str(c.receipt_count)),
            "revenue by local weekday and hour (rounded to whole units; --json: exact):",
            _grid(week, lambda c: str(c.revenue.quantize(Decimal(1)))),
            f"total: {t.receipt_count} receipts, {t.item_quantity} items, revenue {t.revenue}",
        ]
    )


def _percent(change: Decimal | None) -> str:
    return "n/a (nothing the week before)" if change is None else f"{change:+}%"


def _day_text(day: date, zone: str) -> str:
    return f"local day {day} ({zone})" if zone != "UTC" else f"UTC day {day}"


def _week_before_text(c: DayComparison) -> str:
    rows = [
        ("local day", str(c.day.day), str(c.week_before.day), ""),
        ("receipts", str(c.day.receipt_count), str(c.week_before.receipt_count),
         _percent(c.receipt_change_percent)),
        ("revenue", str(c.day.revenue), str(c.week_before.revenue),
         _percent(c.revenue_change_percent)),
        ("final", "yes" if c.day.final else "no", "yes" if c.week_before.final else "no", ""),
    ]  # fmt: skip
    head = f"store {c.operation_id} ({c.name}), {c.time_zone}, {c.day.day:%A} vs a week before"
    if c.until is not None:
        head += f", both up to {c.until} local time"
    return head + "\n" + "\n".join(f"{a:<10} {b:>14} {d:>14}  {e}".rstrip() for a, b, d, e in rows)


class UnknownReceipt(Exception):
    """The answer to `receipt` is `unknown`: shown like any answer, exit code 3."""


def _receipt_text(r: ReceiptStatus) -> str:
    lines = [f"{r.status}: {r.detail}"]
    if r.winner is not None:
        lines.append(
            f"winner: partition {r.winner.partition} offset {r.winner.offset}, first seen "
            f"{r.first_seen_at or '?'}; happened at {r.happened_at} (day {r.day}), "
            f"late {'yes' if r.late else 'no'}, in the speed view "
            f"{'yes' if r.in_speed_view else 'no (beyond its lateness bound)'}"
        )
    if r.known_by:
        lines.append(
            f"known by: {', '.join(r.known_by)} (answered from the {r.source} layer's index)"
        )
    if r.last_resend is not None:
        lines.append(
            f"last resend absorbed: partition {r.last_resend.partition} offset "
            f"{r.last_resend.offset} at {r.last_resend.timestamp or '?'}"
        )
    for c in r.conflicts:
        lines.append(
            f"conflicting copy at partition {c.copy.kafka.partition} offset "
            f"{c.copy.kafka.offset} differs in {', '.join(c.differs) or '?'}: "
            f"revenue {c.copy.revenue} vs the winner's {c.winner.revenue}, happened at "
            f"{c.copy.happened_at} vs {c.winner.happened_at}"
        )
    for d in r.dead_letters:
        lines.append(
            f"dead letter at {d.kafka_topic} partition {d.kafka.partition} offset "
            f"{d.kafka.offset}: {d.reason}" + (f" ({d.detail})" if d.detail else "")
        )
    if r.dead_letters_note:
        lines.append(r.dead_letters_note)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    settings = load_settings()
    if args.command == "cookbook":
        values = {k: getattr(args, k, v) for k, v in cookbook.EXAMPLE.items()}
        values["keyspace"] = settings.cassandra.keyspace
        try:
            parse_day(str(values["day"]))
            text = cookbook.markdown(values)
        except (QueryError, ValueError) as exc:  # StoreError, UnalignedDay: --zone or --day refused
            print(f"pos-serve cookbook: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(text.strip("`").removeprefix("sql\n"))
        return 0
    if args.command == "http":
        from pos_lambda.serving.http import serve

        serve(settings, args.port)
        return 0
    try:
        print(_show(args, settings))
    except (QueryError, BrokenStore) as exc:
        print(f"pos-serve {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnknownStore as exc:
        print(f"pos-serve {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN_STORE
    except UnknownReceipt as exc:
        print(exc)  # the answer, on stdout as any answer
        return EXIT_UNKNOWN_RECEIPT
    except Unavailable as exc:
        print(f"pos-serve {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
