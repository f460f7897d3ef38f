"""The store registry: each store's name, IANA time zone and opening hours (issue 52).

`model` holds the pure rules (validation, local days, opening hours), `local_day` maps a
store's local business day onto the UTC 15-minute windows the views are keyed by,
`registry` is the port (one Cassandra adapter, one in-memory fake for unit tests) and
`cli` is `pos-stores add|set|list`.
"""
