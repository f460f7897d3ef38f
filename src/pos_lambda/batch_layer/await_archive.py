"""The batch DAG's `await_archive`: may an interval's recompute start?

Once every record Kafka received before the interval's end is in the master dataset,
by the archiver's committed offsets (adapters/archive_offsets.py). The archiver writes
every 30 s, but it yields the cores to the views query, so under load it can run
minutes behind: a fixed grace after the hour would let the recompute miss the hour's
last records and the serving layer count their windows short (it takes batch views as
final up to the run's end) until the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from pos_lambda.adapters.archive_offsets import archived_until
from pos_lambda.settings import Settings, load_settings

log = logging.getLogger("pos.batch")

# A record created just before the end may still be on its way to the broker (the
# producer batches for milliseconds, retries for seconds); after this long it counts as
# a late receipt, which the next runs' look-back recomputes.
IN_FLIGHT = timedelta(seconds=30)


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
