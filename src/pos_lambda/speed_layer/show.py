"""Print a glance at the speed views: busiest store-windows and dead-letter reasons.

    python -m pos_lambda.speed_layer.show [--limit 10]

For anything else, query the views with CQL (`pos-serve cookbook`; docs/serving.md).
"""

from __future__ import annotations

import argparse
from collections import Counter

from pos_lambda.schemas import cql
from pos_lambda.settings import load_settings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=10, help="windows to show")
    args = parser.parse_args()
    from pos_lambda.adapters import cassandra_client

    settings = load_settings()
    with cassandra_client.open_session(settings) as session:
        aggs = list(session.execute(f"SELECT * FROM {cql.AGG_SPEED_TABLE}"))
        receipts = session.execute(f"SELECT COUNT(*) FROM {cql.RAW_TABLE}").one()[0]
        reasons = Counter(
            r.reason.split(":")[0]
            for r in session.execute(f"SELECT reason FROM {cql.DEAD_LETTERS_TABLE}")
        )
    print(
        f"{receipts} receipts in {cql.RAW_TABLE}; {len(aggs)} store-windows in "
        f"{cql.AGG_SPEED_TABLE}; {sum(reasons.values())} dead letters {dict(reasons)}"
    )
    print(
        f"{'store':>6} {'window start (UTC)':<20} {'receipts':>8} {'items':>6} "
        f"{'revenue':>10} {'late':>5}"
    )
    for r in sorted(aggs, key=lambda r: r.revenue, reverse=True)[: args.limit]:
        print(
            f"{r.operation_id:>6} {r.window_start:%Y-%m-%d %H:%M}     {r.receipt_count:>8} "
            f"{r.item_quantity:>6} {r.revenue:>10} {r.late_count:>5}"
        )


if __name__ == "__main__":
    main()
