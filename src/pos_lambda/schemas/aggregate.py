"""A 15-minute aggregate: the measures every aggregate view holds of one store's window.

One type for every layer that holds one: the views store these columns per store and
window (`pos_lambda.views.aggregation.AGGREGATE_COLUMNS`, the `agg_15m_*` tables of
`cql.py`), the producer's ledger and the auditor sum them from receipts in Python, and
the serving layer reads them back beside the row's key. A NamedTuple, so an aggregate
compares equal to a plain tuple of the four values.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, NamedTuple


class Aggregate(NamedTuple):
    """What one store's 15-minute window (or any set of them) adds up to: each unique
    receipt once, resends never."""

    receipt_count: int
    item_quantity: int
    revenue: Decimal
    late_count: int

    def plus_receipt(self, item_quantity: int, revenue: Decimal, late: bool) -> Aggregate:
        """This aggregate with one more unique receipt counted."""
        return Aggregate(
            self.receipt_count + 1,
            self.item_quantity + item_quantity,
            self.revenue + revenue,
            self.late_count + (1 if late else 0),
        )

    @classmethod
    def of_row(cls, row: Any) -> Aggregate:
        """The measures of any row that carries them by name: a view's driver row, a
        served window. Revenue as Decimal whatever the row held it as."""
        return cls(row.receipt_count, row.item_quantity, Decimal(row.revenue), row.late_count)


NO_RECEIPTS = Aggregate(0, 0, Decimal("0.00"), 0)
