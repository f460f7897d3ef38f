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

# The simulated stores as data (`--store-hours`): name, IANA zone, local opening hours
# per weekday, cycled over the stores (store i gets entry i % len). One at UTC+05:45,
# zones with DST in both hemispheres, a half-hour offset, a 24-hour store, closed days.
# HOURLY_TRAFFIC then shapes each store's traffic by its *local* hour while it is open.
STORE_CATALOG: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Bratislava Old Town", "Europe/Bratislava", ("mon-sat=07:00-21:00", "sun=09:00-18:00")),
    ("Kathmandu Thamel", "Asia/Kathmandu", ("daily=07:00-21:00",)),
    ("New York SoHo", "America/New_York", ("mon-fri=07:00-22:00", "weekend=08:00-20:00")),
    ("London Camden", "Europe/London", ("daily=06:00-23:00",)),
    ("Mumbai Bandra", "Asia/Kolkata", ("mon-sat=08:00-22:00",)),
    ("Adelaide Rundle", "Australia/Adelaide", ("mon-fri=07:30-19:00", "sat=08:00-17:00")),
    ("Kosice 24/7", "Europe/Bratislava", ("daily=00:00-24:00",)),
)
