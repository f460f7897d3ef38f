"""A small built-in catalogue and store layout for the simulator (plain data)."""

from __future__ import annotations

from decimal import Decimal

# (title, unit price): a café-bakery-grocery mix, prices as printed on receipts.
ITEMS: tuple[tuple[str, Decimal], ...] = tuple(
    (title, Decimal(price))
    for title, price in (
        ("Espresso", "1.90"),
        ("Cappuccino", "2.60"),
        ("Flat White", "2.90"),
        ("Tea", "1.50"),
        ("Croissant", "1.20"),
        ("Pain au chocolat", "1.40"),
        ("Bagel", "2.10"),
        ("Sandwich", "4.50"),
        ("Salad bowl", "6.90"),
        ("Soup of the day", "3.80"),
        ("Mineral water 0.5l", "0.99"),
        ("Orange juice", "2.49"),
        ("Milk 1l", "1.09"),
        ("Bread loaf", "2.35"),
        ("Butter 250g", "2.79"),
        ("Eggs x10", "3.19"),
        ("Apples 1kg", "1.99"),
        ("Bananas 1kg", "1.49"),
        ("Chocolate bar", "1.29"),
        ("Newspaper", "1.80"),
    )
)

# Relative traffic by UTC hour of the simulated day: quiet nights, a morning
# coffee peak, a lunch peak and an evening shopping peak.
HOURLY_TRAFFIC: tuple[float, ...] = (
    0.05, 0.03, 0.02, 0.02, 0.03, 0.08, 0.25, 0.60, 0.85, 0.70, 0.60, 0.80,
    1.00, 0.95, 0.60, 0.55, 0.65, 0.85, 0.90, 0.70, 0.45, 0.30, 0.15, 0.08,
)  # fmt: skip

# UTC offsets (hours) stores print their local time with.
STORE_UTC_OFFSETS: tuple[int, ...] = (0, 1, 2)
