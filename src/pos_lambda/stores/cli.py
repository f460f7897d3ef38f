"""`pos-stores`: the store registry (the `stores` table) from the command line.

    pos-stores add 101 --name "Thamel" --zone Asia/Kathmandu \\
        --hours mon-fri=07:00-21:00 --hours sat=08:00-14:00      # sunday: closed
    pos-stores set 101 --zone Asia/Kathmandu --hours sun=10:00-14:00
    pos-stores list [--json]

Hours are the store's local wall clock, per weekday: DAYS=HH:MM-HH:MM or DAYS=closed,
DAYS being mon..sun, a range (mon-fri), a list (sat,sun), daily, weekdays or weekend;
later --hours override earlier ones. `add` closes the days it is not told about; `set`
changes only what it is given. Overnight hours are refused: split them at midnight
(fri=18:00-24:00 and sat=00:00-02:00). The zone is an IANA name (Europe/Bratislava).
Cassandra settings come from POS_* variables (`python -m pos_lambda.settings`).
Exit codes: 0 done, 2 bad input (zone, hours, an existing store for add), 3 unknown
store (set), 4 Cassandra unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from pos_lambda.stores.model import WEEKDAYS, Store, StoreError, parse_week
from pos_lambda.stores.registry import CassandraStores, RegistryUnavailable, StoreRegistry

EXIT_BAD_INPUT, EXIT_UNKNOWN_STORE, EXIT_UNAVAILABLE = 2, 3, 4


class UnknownStoreError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pos-stores", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    hours_help = "DAYS=HH:MM-HH:MM or DAYS=closed, local time; repeat for more days"
    add = sub.add_parser("add", help="register a new store", description="register a new store")
    add.add_argument("operation_id", type=int, help="the store's operation_id")
    add.add_argument("--name", required=True, help="a name people recognise")
    add.add_argument("--zone", required=True, help="IANA time zone, e.g. Asia/Kathmandu")
    add.add_argument("--hours", action="append", required=True, help=hours_help)
    set_ = sub.add_parser(
        "set",
        help="change a registered store",
        description="change a registered store's name, zone or the hours of the days given",
    )
    set_.add_argument("operation_id", type=int, help="the store's operation_id")
    set_.add_argument("--name", help="a new name")
    set_.add_argument("--zone", help="a new IANA time zone")
    set_.add_argument("--hours", action="append", default=[], help=hours_help)
    ls = sub.add_parser("list", help="list the stores", description="list the registered stores")
    ls.add_argument("--json", action="store_true", help="JSON (one object per store)")
    return p


def _as_dict(store: Store) -> dict[str, object]:
    return {
        "operation_id": store.operation_id,
        "name": store.name,
        "time_zone": store.time_zone,
        "opening_hours": store.opening_hours(),
    }


def render_table(stores: list[Store]) -> str:
    if not stores:
        return "(no stores: add one with pos-stores add)"
    header = ["operation_id", "name", "time_zone", *WEEKDAYS]
    rows = [[str(s.operation_id), s.name, s.time_zone, *s.opening_hours().values()] for s in stores]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    )


def run(args: argparse.Namespace, registry: StoreRegistry) -> str:
    """The command's output; raises StoreError / UnknownStoreError / RegistryUnavailable."""
    if args.command == "list":
        stores = registry.all()
        return (
            json.dumps([_as_dict(s) for s in stores], indent=2)
            if args.json
            else render_table(stores)
        )
    if args.command == "add":
        store = Store.create(args.operation_id, args.name, args.zone, parse_week(args.hours))
        if registry.get(args.operation_id) is not None:
            raise StoreError(
                f"store {args.operation_id} is registered already: change it with "
                f"pos-stores set {args.operation_id} ..."
            )
        registry.put(store)
        return f"added {render_table([store])}"
    current = registry.get(args.operation_id)
    if current is None:
        raise UnknownStoreError(
            f"store {args.operation_id} is not registered: add it with "
            f"pos-stores add {args.operation_id} --name ... --zone ... --hours ..."
        )
    if args.name is None and args.zone is None and not args.hours:
        raise StoreError("nothing to change: give --name, --zone or --hours")
    store = current.with_changes(args.name, args.zone, parse_week(args.hours))
    registry.put(store)
    return render_table([store])


def main(
    argv: list[str] | None = None,
    registry_factory: Callable[[], StoreRegistry] | None = None,
) -> int:
    args = _parser().parse_args(argv)

    def cassandra() -> StoreRegistry:
        from pos_lambda.settings import load_settings

        return CassandraStores(load_settings())

    registry = (registry_factory or cassandra)()
    try:
        print(run(args, registry))
    except StoreError as exc:
        print(f"pos-stores {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnknownStoreError as exc:
        print(f"pos-stores {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN_STORE
    except RegistryUnavailable as exc:
        print(f"pos-stores {args.command}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    finally:
        registry.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
