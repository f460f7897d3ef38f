"""A real Spark driver writes its class archive at its first run's exit, and the next
run of the same application starts from it (src/pos_lambda/adapters/spark_class_archive.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pos_lambda.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.integration

APP = "pos-test-class-archive"
# A driver as the jobs build it: the project's session, one Spark job, stopped.
DRIVER = f"""
from pos_lambda.settings import load_settings
from pos_lambda.adapters.spark_session import build_session
spark = build_session(load_settings(), {APP!r})
print("sum", spark.range(1000).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def _run_driver(
    state: Path, classes_log: Path, more_options: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "POS_STATE_DIR": str(state),  # the archives go to STATE_DIR/class-archives
        # Where each class came from: a jar, or the archive ("shared objects file (top)").
        "POS_SPARK_DRIVER_JAVA_OPTIONS": (
            f"-XX:+UseParallelGC -Xlog:class+load:file={classes_log} {more_options}"
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], env=env, cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sum 499500" in done.stdout
    return done


def _from_archive(classes_log: Path) -> int:
    return sum("source: shared objects file (top)" in line for line in classes_log.open())


def test_first_run_writes_the_archive_and_the_next_starts_from_it(
    services: Settings, tmp_path: Path
) -> None:
    archives = tmp_path / "state" / "class-archives"
    first = _run_driver(tmp_path / "state", tmp_path / "first.log")
    # Published only once the JVM had written it whole; nothing half-written left.
    assert [p.name.rsplit("-", 1)[0] for p in archives.iterdir()] == [APP]
    (archive,) = archives.iterdir()
    assert archive.suffix == ".jsa" and archive.stat().st_size > 50_000_000
    # The JVM's thousand-odd warnings while writing it stay off the driver's output.
    assert "[cds" not in first.stdout + first.stderr
    assert _from_archive(tmp_path / "first.log") == 0

    second = _run_driver(tmp_path / "state", tmp_path / "second.log")
    assert "[cds" not in second.stdout + second.stderr
    # Spark's, Scala's and the connectors' classes, parsed and verified a run before.
    assert _from_archive(tmp_path / "second.log") > 5_000
    assert list(archives.iterdir()) == [archive]


def test_a_driver_with_a_flight_recording_starts_without_the_archive(
    services: Settings, tmp_path: Path
) -> None:
    # JDK 17 crashed (SIGSEGV) mapping an archive into a JVM started with a recording.
    archives = tmp_path / "state" / "class-archives"
    _run_driver(tmp_path / "state", tmp_path / "first.log")
    (archive,) = archives.iterdir()
    recording = tmp_path / "driver.jfr"
    _run_driver(
        tmp_path / "state",
        tmp_path / "recorded.log",
        f"-XX:StartFlightRecording=filename={recording} -Xlog:jfr*=warning",
    )
    assert recording.stat().st_size > 0
    assert _from_archive(tmp_path / "recorded.log") == 0
    assert list(archives.iterdir()) == [archive]  # kept for the drivers that can map it
