"""PySpark's worker daemon, without two costs it adds to every task.

Spark starts its Python workers through this module (`spark.python.daemon.module`, set
in adapters/spark_session.py): they run the contract's validator, a Python UDF, in every task that
validates Kafka records.

PySpark's worker calls `importlib.invalidate_caches()` before every task. On Python 3.10
and 3.11 that makes each zip importer re-read its archive's whole directory at once
(CPython gh-103200; lazy since 3.12, and SPARK-54744 calls it less often in releases
after 3.5). Spark puts pyspark.zip, py4j's zip and the spark-core jar (5,221 entries) on
its workers' path, and the imports leave 13 zip importers over them: each task of a
trivial UDF cost its worker ~60 ms of CPU before doing anything, about as much as the
Spark job around it (the first action of a 10-record micro-batch runs one such task per
Kafka partition, and the archiver's micro-batches as many again).

The archives Spark ships do not change under a running worker, so their importers keep
the directory they read when they were created, as on Python 3.9 (which had no such
invalidation). Modules added later (`addPyFile`) are new paths, read by new importers.

After every task, a reused worker also runs a full garbage collection (`gc.collect()`
in PySpark's daemon) before it takes the next one: it traverses every object the worker
holds, the modules the contract's validator imports among them: ~40 ms of CPU a task
in a trivial UDF's worker, a median of 78 ms in the views query's. And the worker's
next task waits for it (Spark hands a finished worker its next task at
once). Here it collects the young generations only, where a task's cyclic garbage is;
Python's own thresholds still run the full collections.
"""

from __future__ import annotations

import gc
import zipimport
from types import ModuleType


def _keep_directory(self: zipimport.zipimporter) -> None:
    """An archive's directory stays as read: Spark's archives do not change in a run."""


def keep_archive_directories() -> None:
    """Make zip importers keep their directories (when Python moves to 3.12: drop this)."""
    zipimport.zipimporter.invalidate_caches = _keep_directory  # type: ignore[method-assign]


def keeps_archive_directories() -> bool:
    """Whether this process runs with the change (a test asks Spark's workers)."""
    return zipimport.zipimporter.invalidate_caches is _keep_directory


class YoungGenerations:
    """What PySpark's daemon sees as its `gc` module: its only use is the collection
    after each task, which becomes one of the young generations (0 and 1)."""

    @staticmethod
    def collect() -> int:
        return gc.collect(1)


def collect_young_generations(daemon: ModuleType) -> None:
    """Make the daemon's collection after each task one of the young generations."""
    daemon.gc = YoungGenerations()  # type: ignore[attr-defined]


def collects_young_generations() -> bool:
    """Whether this process's daemon runs with the change (a test asks Spark's workers)."""
    import sys

    daemon = sys.modules.get("pyspark.daemon")
    return daemon is not None and isinstance(getattr(daemon, "gc", None), YoungGenerations)


if __name__ == "__main__":  # how Spark starts it: python -m pos_lambda.adapters.spark_python_daemon
    # By its import name: this file runs as __main__, a module of its own, and the
    # workers' code (a test's UDF) finds the module under its name.
    from pyspark import daemon

    from pos_lambda.adapters import spark_python_daemon

    spark_python_daemon.keep_archive_directories()
    spark_python_daemon.collect_young_generations(daemon)

    daemon.manager()  # type: ignore[no-untyped-call]
