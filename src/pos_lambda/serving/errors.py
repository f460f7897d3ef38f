"""What the serving layer refuses or cannot do, as exceptions each front door maps once.

The HTTP app turns them into status codes (QueryError -> 422, PageGone -> 410,
UnknownStore -> 404, BrokenStore -> 409, Unavailable -> 503), the CLI into exit codes;
the message is written for the user and says what to change.
"""

from __future__ import annotations


class ServingError(Exception):
    """Base class: the message is meant for the user."""


class QueryError(ServingError):
    """A request the serving layer refuses (bad date, inverted or too large range, ...)."""


class PageGone(QueryError):
    """A page token this API issued that can no longer be honoured: older than the
    documented maximum age, or naming a batch version that is no longer served."""


class UnknownStore(ServingError):
    """No view holds any receipt of this store."""

    def __init__(self, store: int) -> None:
        super().__init__(f"store {store} is unknown: no view holds any receipt of it")
        self.store = store


class UnregisteredStore(UnknownStore):
    """The store registry has no time zone for this store, so it has no local day."""

    def __init__(self, store: int) -> None:
        ServingError.__init__(
            self,
            f"store {store} is not in the store registry, so its local day is unknown: "
            f"add it with pos-stores add {store} --name ... --zone ... --hours ...",
        )
        self.store = store


class BrokenStore(ServingError):
    """The store registry's row of this store breaks its rules (edited by hand: an
    unknown zone, unreadable hours), so the store has no local day until it is fixed."""

    def __init__(self, store: int, reason: str) -> None:
        super().__init__(
            f"the stores table's row of store {store} is broken ({reason}), so its local "
            f"day is unknown: rewrite that row with pos-stores set {store} --repair --name "
            "... --zone ... --hours ..., or ask by UTC day meanwhile"
        )
        self.store = store


class Unavailable(ServingError):
    """Cassandra cannot be reached or did not answer in time."""
