"""How the streaming jobs are triggered: a fixed interval, or everything available now."""

from __future__ import annotations

from pyspark.sql.streaming.readwriter import DataStreamWriter

from infra.settings import Settings


def with_trigger(
    writer: DataStreamWriter, settings: Settings, available_now: bool
) -> DataStreamWriter:
    """`availableNow` (drain what Kafka holds now, then stop) or every N seconds."""
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{settings.speed_trigger_seconds} seconds")
