"""How the streaming jobs are triggered: a fixed interval, or everything available now."""

from __future__ import annotations

from pyspark.sql.streaming.readwriter import DataStreamWriter


def with_trigger(writer: DataStreamWriter, seconds: float, available_now: bool) -> DataStreamWriter:
    """`availableNow` (drain what Kafka holds now, then stop) or every `seconds`."""
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{seconds} seconds")
