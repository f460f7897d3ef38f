"""`pos-stores`: the store registry (the `stores` table) from the command line.

    pos-stores add 101 --name "Thamel" --zone Asia/Kathmandu \\
        --hours mon-fri=07:00-21:00 --hours sat=08:00-14:00      # sunday: closed
    pos-stores set 101 --zone Asia/Kathmandu --hours sun=10:00-14:00
    pos-stores set 101 --repair --name "Thamel" --zone Asia/Kathmandu \\
        --hours mon-fri=07:00-21:00                 # a broken row, rewritten whole
    pos-stores list [--json]

Hours are the store's local wall clock, per weekday: DAYS=HH:MM-HH:MM or DAYS=closed,
DAYS being mon..sun, a range (mon-fri), a list (sat,sun), daily, weekdays or weekend;
later --hours override earlier ones. `add` closes the days it is not told about; `set`
changes only what it is given. A row edited by hand (cqlsh) into something invalid does
not read back, so `set` cannot change it field by field: `set --repair` rewrites it whole
from --name, --zone and --hours (as `add` does: days not named are closed), without
reading it. Overnight hours are refused: split them at midnight
(fri=18:00-24:00 and sat=00:00-02:00). The zone is an IANA name (Europe/Bratislava).
Cassandra settings come from POS_* variables (`python -m pos_lambda.settings`).
Exit codes: 0 done, 2 bad input (zone, hours, an existing store for add), 3 unknown
store (set), 4 Cassandra unreachable, 5 the store's row is broken (set --repair).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from pos_lambda.stores.model import WEEKDAYS, Store, StoreError, parse_week
from pos_lambda.stores.registry import CassandraStores, RegistryUnavailable, StoreRegistry

EXIT_BAD_INPUT, EXIT_UNKNOWN_STORE, EXIT_UNAVAILABLE, EXIT_BROKEN_ROW = 2, 3, 4, 5


class UnknownStoreError(Exception):
    pass


class BrokenRowError(Exception):
    """The store's row does not read back (edited by hand): only `set --repair` helps."""


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
    set_.add_argument(
        "--repair",
        action="store_true",
        help="rewrite the row whole, without reading it (a row edited by hand into "
        "something invalid does not read back): needs --name, --zone and --hours; days "
        "not named are closed",
    )
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
        if _current(registry, args.operation_id) is not None:
            raise StoreError(
                f"store {args.operation_id} is registered already: change it with "
                f"pos-stores set {args.operation_id} ..."
            )
        registry.put(store)
        return f"added {render_table([store])}"
    if args.repair:
        return _repair(args, registry)
    current = _current(registry, args.operation_id)
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


def _current(registry: StoreRegistry, operation_id: int) -> Store | None:
    """The store's row as it reads back; a row that breaks the rules is a BrokenRowError
    that names the one way out (`add` and `set` both read it first)."""
    try:
        return registry.get(operation_id)
    except StoreError as exc:
        reason = str(exc).removeprefix(f"store {operation_id}: ")
        raise BrokenRowError(
            f"the stores table's row of store {operation_id} is broken ({reason}), so it "
            f"cannot be changed field by field: rewrite it whole with pos-stores set "
            f"{operation_id} --repair --name ... --zone ... --hours ... (days not named are "
            "closed)"
        ) from None


def _repair(args: argparse.Namespace, registry: StoreRegistry) -> str:
    """`set --repair`: the whole row from the arguments, written without reading the
    row there (which may not read back): nothing of it is kept, so everything is asked."""
    missing = [
        flag
        for flag, given in (("--name", args.name), ("--zone", args.zone), ("--hours", args.hours))
        if not given
    ]
    if missing:
        raise StoreError(
            f"--repair rewrites the row whole, keeping nothing of it: give {', '.join(missing)} "
            "too (days not named in --hours are closed)"
        )
    store = Store.create(args.operation_id, args.name, args.zone, parse_week(args.hours))
    registry.put(store)
    return f"repaired store {args.operation_id} (its row rewritten whole):\n{render_table([store])}"


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
    except BrokenRowError as exc:
        print(f"pos-stores {args.command}: {exc}", file=sys.stderr)
        return EXIT_BROKEN_ROW
    finally:
        registry.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
