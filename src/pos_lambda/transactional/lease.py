"""One live processor per instance id: a lease row in Cassandra, taken before the
instance touches Kafka (the alerts processor's and the deduplicated topic's: one table,
a row per transactional.id).

Why a lease: two instances with one id share a `transactional.id` and a static
`group.instance.id`. Each start fences the other (`init_transactions` bumps the epoch,
the group fences the older static member), and a supervisor that restarts the fenced
one (compose's `restart: unless-stopped`, `--scale alerts=2`, two `pos-alerts run` with
the default id) makes them take turns forever. Kafka has no "is this transactional.id
in use" query, and deriving a fresh id per process would give up what the stable id
is for: a restarted instance fences its dead predecessor and aborts its open transaction
at once (a random id would leave that transaction to block read_committed readers for
transaction.timeout.ms). So the id stays stable and an instance first takes a lease on
it: `INSERT ... IF NOT EXISTS USING TTL` (a lightweight transaction: of two racing
instances exactly one wins), renewed by a heartbeat (every TTL/3) that rewrites the row
with a new beat count. An instance that finds the row held by another owner watches it:
a beat count that moves means a live holder (refuse: exit EXIT_ID_IN_USE, before
`init_transactions` could fence it); a row that expires (its holder died: kill -9, a
frozen zombie) is taken. A restart after a crash so waits at most the TTL; a clean stop
deletes the row (its restart is immediate); an in-place restart (the watchdog's exec,
same pid) keeps its owner token in the environment and takes its own row back at once.

Kafka's fencing stays the safety net: the lease only keeps two live instances from
starting with one id. If Cassandra is unreachable mid-run, renewals fail and are retried
(the instance keeps running: no other instance can take the lease meanwhile); an
instance that finds its row taken by another owner (it was frozen past the TTL) stops,
as a fenced one does.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pos_lambda.adapters.service import ServiceError

if TYPE_CHECKING:
    from pos_lambda.adapters.cassandra_client import OpenSession

log = logging.getLogger(__name__)

# The owner token of this process, kept across the watchdog's in-place restart (exec).
OWNER_ENV = "ALERTS_LEASE_OWNER"
_WATCH_INTERVAL_S = 0.5  # how often a waiting instance looks at the holder's row


class IdInUse(Exception):
    """Another live instance holds this instance id."""


@dataclass(frozen=True)
class Holder:
    """A lease row as read: who holds it and how often it renewed."""

    owner: str
    host: str
    pid: int
    beats: int

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def owner_token(inherited: str | None, pid: int, fresh: str) -> str:
    """This process's owner token: the inherited one when it was made by this very pid
    (an exec keeps the pid: the watchdog's in-place restart), else `fresh`. A child
    that inherited its parent's environment has another pid and gets its own."""
    if inherited is not None and inherited.split(":", 1)[0] == str(pid):
        return inherited
    return fresh


Verdict = Literal["take_over", "refuse", "wait"]


def judge(mine: str, first: Holder | None, current: Holder, waited_s: float, ttl_s: int) -> Verdict:
    """What a starting instance does about a lease row held when it tried to insert its own.

    first: the row as first seen (None: this is the first look); waited_s: since then.
    Its own row (an in-place restart) is taken over; a row that renewed (beats moved) or
    changed hands meanwhile has a live holder; a row that neither renewed nor expired
    within the TTL and a beat cannot happen with a live holder nor a dead one: refused,
    to be safe.
    """
    if current.owner == mine:
        return "take_over"
    if first is not None and (current.owner, current.beats) != (first.owner, first.beats):
        return "refuse"
    # Cassandra expires cells by the second: a margin of a beat, and at least 3 s.
    if waited_s > ttl_s + max(ttl_s / 3, 3):
        return "refuse"
    return "wait"


Renewal = Literal["held", "vanished", "lost"]


def renewal(applied: bool, current_owner: str | None) -> Renewal:
    """A renewal's outcome (an UPDATE ... IF owner = mine): held; the row vanished (it
    expired while Cassandra was unreachable: take it again if free); or another owner
    holds it now (this instance must stop)."""
    if applied:
        return "held"
    return "vanished" if current_owner is None else "lost"


class Lease:
    """The lease on one transactional id (`acquire`, a heartbeat thread, `release`)."""

    def __init__(
        self, settings: Any, transactional_id: str, ttl_s: int, how_to_rename: str
    ) -> None:
        """how_to_rename: how a user gives an instance another id (said when refused)."""
        from pos_lambda.schemas import cql

        self.settings = settings
        self.name = transactional_id
        self.ttl_s = ttl_s
        self.how_to_rename = how_to_rename
        self.table = f"{settings.cassandra.keyspace}.{cql.ALERTS_LEASES_TABLE}"
        self.owner = owner_token(
            os.environ.get(OWNER_ENV), os.getpid(), f"{os.getpid()}:{uuid.uuid4().hex}"
        )
        self.host = socket.gethostname()
        self.beats = 0
        self.lost: Holder | None = None  # set by the heartbeat when another owner took it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened: OpenSession | None = None
        self._session: Any = None

    # --- the shell ---------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease, waiting out a dead holder's row; raise IdInUse for a live one,
        ServiceError when Cassandra cannot be reached."""
        from cassandra import InvalidRequest
        from cassandra.cluster import NoHostAvailable

        from pos_lambda.adapters import cassandra_client

        try:
            opened = cassandra_client.open_session(
                self.settings, keyspace=False, writes=True, timeout=10
            )
            self._opened, self._session = opened, opened.session
            try:
                self._acquire()
            except BaseException:
                opened.close()
                raise
        except NoHostAvailable as exc:
            raise ServiceError(
                f"cannot reach Cassandra at {','.join(self.settings.cassandra_contact_points)}:"
                f"{self.settings.cassandra.port} for the lease on {self.name}: is it running? "
                f"({exc})"
            ) from exc
        except InvalidRequest as exc:  # no keyspace or table
            raise ServiceError(
                f"no lease table {self.table}: apply the schema (`make schema`) ({exc})"
            ) from exc
        except IdInUse:
            raise
        except Exception as exc:  # a timeout, an unavailable replica: say so, exit 1
            raise ServiceError(f"the lease on {self.name}: Cassandra: {exc}") from exc
        os.environ[OWNER_ENV] = self.owner
        self.lost = None  # a take-over that lost a race on the way is history now
        self._thread = threading.Thread(target=self._heartbeat, name="lease", daemon=True)
        self._thread.start()

    def _acquire(self) -> None:
        first: Holder | None = None
        since = time.monotonic()
        while True:
            applied, current = self._insert()
            if applied:
                log.info("lease on %s taken (%s s TTL)", self.name, self.ttl_s)
                return
            if current is None:  # expired between the insert and its answer
                continue
            verdict = judge(self.owner, first, current, time.monotonic() - since, self.ttl_s)
            if verdict == "take_over":
                if self._renew() == "held":
                    log.info("lease on %s taken back after an in-place restart", self.name)
                    return
                continue
            if verdict == "refuse":
                raise IdInUse(
                    f"another live instance ({current.describe()}) holds transactional.id "
                    f"{self.name}: give each running instance its own {self.how_to_rename}; "
                    "with compose, one service per id, not --scale"
                )
            if first is None:
                first = current
                log.info(
                    "lease on %s held by %s: waiting up to %s s for it to expire or renew",
                    self.name, current.describe(), self.ttl_s,
                )  # fmt: skip
            # Waiting on another process's row in Cassandra: nothing to await but time.
            time.sleep(_WATCH_INTERVAL_S)

    def _values(self) -> tuple[Any, ...]:
        return (self.owner, self.host, os.getpid(), self.beats)

    def _insert(self) -> tuple[bool, Holder | None]:
        self.beats += 1
        row = self._session.execute(
            f"INSERT INTO {self.table} (transactional_id, owner, host, pid, beats, renewed_at) "
            "VALUES (%s, %s, %s, %s, %s, toTimestamp(now())) IF NOT EXISTS USING TTL %s",
            (self.name, *self._values(), self.ttl_s),
        ).one()
        return bool(row.applied), _holder(row)

    def _renew(self) -> Renewal:
        # Every cell again with a new TTL: cells left from the insert would expire first.
        self.beats += 1
        row = self._session.execute(
            f"UPDATE {self.table} USING TTL %s SET owner = %s, host = %s, pid = %s, "
            "beats = %s, renewed_at = toTimestamp(now()) WHERE transactional_id = %s "
            "IF owner = %s",
            (self.ttl_s, *self._values(), self.name, self.owner),
        ).one()
        outcome = renewal(bool(row.applied), None if row.applied else row.owner)
        if outcome == "lost":  # the answer names the owner only: read who it is
            current = self._session.execute(
                f"SELECT owner, host, pid, beats FROM {self.table} WHERE transactional_id = %s",
                (self.name,),
            ).one()
            self.lost = _holder(current) or Holder(row.owner, "?", 0, 0)
        return outcome

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                outcome = self._renew()
                if outcome == "vanished":
                    applied, current = self._insert()
                    if not applied and current is not None:
                        self.lost = current
                if self.lost is not None:
                    log.error("lease on %s taken by %s", self.name, self.lost.describe())
                    return
            except Exception as exc:  # Cassandra unreachable: retried at the next beat
                log.warning("lease on %s not renewed: %s", self.name, exc)

    def release(self) -> None:
        """Stop renewing and delete the row if it is still ours (a clean stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._opened is None:
            return
        try:
            self._session.execute(
                f"DELETE FROM {self.table} WHERE transactional_id = %s IF owner = %s",
                (self.name, self.owner),
            )
        except Exception as exc:  # it expires after the TTL anyway
            log.warning("lease on %s not released: %s", self.name, exc)
        finally:
            self._opened.close()


def _holder(row: Any) -> Holder | None:
    """The holder in an LWT's answer (the row's current values when not applied)."""
    owner = getattr(row, "owner", None)
    if owner is None:
        return None
    host, pid, beats = (getattr(row, c, None) for c in ("host", "pid", "beats"))
    return Holder(owner, host or "?", pid or 0, beats or 0)
