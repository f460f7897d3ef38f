"""The batch DAG's `await_archive`: may an interval's recompute start?

Once every record Kafka received before the interval's end is in the master dataset,
by the archiver's committed offsets (adapters/archive_offsets.py). The archiver writes
every 30 s, but it yields the cores to the views query, so under load it can run
minutes behind: a fixed grace after the hour would let the recompute miss the hour's
last records and the serving layer count their windows short (it takes batch views as
final up to the run's end) until the next run.

Before the archiver's first commit there is no master dataset. While Kafka holds
records from before the interval's end, the sensor waits for them like for any others
(the archiver's first micro-batch on a cold driver can take minutes). Once none is
missing and there is still no master dataset, the interval had no records at all:
`ready_to_recompute` raises `NothingArchived`, and the DAG skips the hour's recompute
and quality (the DAG run succeeds, empty) instead of running `pos-batch run` into its
exit 4, "nothing to do yet".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from pos_lambda.adapters import master_dataset
from pos_lambda.adapters.archive_offsets import archived_until
from pos_lambda.settings import Settings, load_settings

log = logging.getLogger("pos.batch")

# A record created just before the end may still be on its way to the broker (the
# producer batches for milliseconds, retries for seconds); after this long it counts as
# a late receipt, which the next runs' look-back recomputes.
IN_FLIGHT = timedelta(seconds=30)


class NothingArchived(Exception):
    """Nothing to recompute: every record before the interval's end is archived, and
    the archiver has not created the master dataset (no record ever reached it)."""


def settings_with(pos_env: Mapping[str, str] | None) -> Settings:
    """The environment's settings with a DAG run's `pos_env` (POS_* names) on top."""
    overrides = {}
    for name, value in (pos_env or {}).items():
        if not name.startswith("POS_"):
            raise ValueError(f"pos_env: {name!r} is not a POS_* setting (see the README)")
        overrides[name.removeprefix("POS_").lower()] = value
    return load_settings(**overrides)


def archived_before(
    end: str, pos_env: Mapping[str, str] | None = None, now: datetime | None = None
) -> bool:
    """True once the master dataset holds every record Kafka received before `end` (an
    ISO-8601 instant, the data interval's end). Logs what it waits for."""
    instant = datetime.fromisoformat(end)
    now = now or datetime.now(UTC)
    if now < instant + IN_FLIGHT:
        log.info(
            "waiting for records sent before %s to reach Kafka (until %s)",
            instant.isoformat(),
            (instant + IN_FLIGHT).isoformat(),
        )
        return False
    settings = settings_with(pos_env)
    lag = archived_until(settings, instant)
    log.info(
        "archiver (consumer group %s, topic %s) at %s: %s",
        settings.speed.archiver_group,
        settings.topics.transactions,
        instant.isoformat(),
        lag.describe(),
    )
    if not lag.done and all(c is None for c in lag.committed.values()):
        log.warning(
            "the archiver has committed no offsets to %s: is `pos-speed run` running "
            "against topic %s?",
            settings.speed.archiver_group,
            settings.topics.transactions,
        )
    return lag.done


def ready_to_recompute(
    end: str, pos_env: Mapping[str, str] | None = None, now: datetime | None = None
) -> bool:
    """await_archive's poke: `archived_before`, and then a master dataset to read.
    Raises NothingArchived (the DAG skips the hour) when there is none to wait for."""
    if not archived_before(end, pos_env, now):
        return False
    missing = master_dataset.missing(settings_with(pos_env))
    if missing is not None:
        raise NothingArchived(f"nothing to recompute before {end}: {missing}")
    return True
