"""Unit-test fixtures. Spark here is a library in local mode: no Kafka, no Cassandra."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def local_spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from pos_lambda.adapters.java import find_java17

    os.environ["JAVA_HOME"] = str(find_java17(None).parent.parent)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # collect() turns timestamps into naive datetimes in the process's zone: pin UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pos-unit-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # The tests' frames hold a few rows: compiling is most of their cost. C1 only (as
        # Settings.bounded), interpreted plans instead of whole-stage code generation and
        # no adaptive re-planning halve the JVM's CPU, the same answers (test_winners.py
        # 42 s -> 17 s; test_native_check.py with test_records.py 44 s -> 21 s). The
        # integration tests keep Spark's defaults, as production does.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The middle test tier, named by what it needs: a unit test that takes a local Spark
    session (JDK 17, seconds to start) is marked `spark`; `make test-pure` leaves them out."""
    for item in items:
        if "local_spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(autouse=True)
def _no_pos_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests see the documented defaults, whatever POS_* the shell exports."""
    for name in [n for n in os.environ if n.startswith("POS_")]:
        monkeypatch.delenv(name)
