"""The Spark driver's loaded classes kept from one run to the next (JDK 17's AppCDS).

A Spark driver loads some 25,000 classes (Spark, Scala, the connector, Delta, Kafka's
client), and the JVM reads, parses and verifies each one at every start, on the same
two cores the queries need. JDK 17's dynamic class data sharing archive keeps that
work: a run started with `-XX:ArchiveClassesAtExit=FILE` writes the classes it loaded,
already parsed and verified, into FILE when its JVM exits; later runs map FILE
(`-XX:SharedArchiveFile`) and take ~16,000 of their classes from it. Measured on the
reference machine (side by side, three rounds alternated, every run exact against the
ledger): a one-shot run of the views query on 1,000 messages 22.6 s instead of 28.5 s
from start to exit; both speed queries one-shot on 252,711 messages 2,679 instead of
2,282 events/s (their two drivers start together, and class loading took the cores
from the other's micro-batch; 1.04x in the benchmark's two rounds, on a machine that
slowed through the run). docs/speed-performance.md has the runs.

One archive per application name (its classes differ) and per fingerprint of the JVM
and the jars: the JVM rejects an archive whose classpath changed anyway, so a new jar
or JDK makes a new archive rather than a warning at every start. The first run of an
application writes it (the JVM spends ~10-15 s of CPU at exit on it, once), into a
file of its own that the driver renames into place after its JVM has exited, so no
run ever maps a half-written archive. `POS_SPARK_CLASS_ARCHIVES=false` turns it off.

A driver whose JVM starts with a Java agent (a metrics exporter such as Prometheus's
JMX agent, an APM agent) or with a flight recording gets no archive: JDK 17 cannot
combine them (see `clash`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pos_lambda.adapters.service import alive

log = logging.getLogger("pos.spark")

# The archive a JVM writes at exit is left unpublished if its driver does not wait
# this long for it; the next run writes one again.
EXIT_WAIT_SECONDS = 120.0


@dataclass(frozen=True)
class Plan:
    """What one driver's JVM does with the archive: map it, or write it at exit."""

    archive: Path
    writes: Path | None  # where the JVM writes it at exit (no archive yet), else None
    java_options: tuple[str, ...]


# JVM options that JDK 17 cannot combine with a dynamic archive (measured on 17.0.15):
# with a Java agent the JVM that should write the archive refuses to start ("Must enable
# AllowArchivingWithJavaAgent"); a Java agent or a flight recording started with the JVM
# crash a JVM that maps one (SIGSEGV in KlassFactory::check_shared_class_file_load_hook:
# both hook class loading); and a JVM writing one drops the recording it was asked for
# ("JFR will be disabled during CDS dumping"). Native agents are ruled out alike, as they
# may hook class loading too, but for the debugger's (jdwp, measured: it maps an archive).
# A recording started later (`jcmd <pid> JFR.start`) was harmless in the same test.
_CLASHING = re.compile(
    r"(?:^|\s)(-javaagent:\S*|-agentpath:\S*|-agentlib:(?!jdwp[=\s]|jdwp$)\S*"
    r"|-XX:StartFlightRecording\S*|-XX:\+FlightRecorder)"
)


# Where else the driver's JVM takes options from: the JVM itself, the `java` launcher,
# and spark-submit's launcher.
OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS")


def clash(*option_strings: str) -> str | None:
    """The first JVM option among `option_strings` (each as a command line has them) that
    rules a class archive out, or None."""
    for options in option_strings:
        if match := _CLASHING.search(options):
            return match.group(1)
    return None


def fingerprint(java: Path, jars: Iterable[Path]) -> str:
    """Changes whenever the JVM or any jar on the driver's classpath changes."""
    digest = hashlib.sha256(str(java.resolve()).encode())
    for jar in sorted(jars):
        stat = jar.stat()
        digest.update(f"\0{jar}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _prefix(app_name: str) -> str:
    """The start of every file of the application's archives (its name, file-safe)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", app_name) + "-"


def archive_path(directory: Path, app_name: str, print_: str) -> Path:
    return directory / f"{_prefix(app_name)}{print_}.jsa"


def java_options(archive: Path, exists: bool, writes: Path) -> tuple[str, ...]:
    """The driver JVM's options (pure). The JVM logs class-sharing warnings to stdout,
    the driver's own output: when writing, some thousand lines about classes it cannot
    keep (Spark's generated classes, old class files) go to a log file beside the
    archive instead; when mapping, a warning that it could not (one line) to stderr."""
    quiet = "-Xlog:cds*=off"
    if exists:
        return (f"-XX:SharedArchiveFile={archive}", quiet, "-Xlog:cds*=warning:stderr")
    log_file = writes.with_suffix(".log")
    return (f"-XX:ArchiveClassesAtExit={writes}", quiet, f"-Xlog:cds*=warning:file={log_file}")


def plan(directory: Path, app_name: str, java: Path, jars: Iterable[Path]) -> Plan:
    """Map this application's archive if there is one; else write it at exit. Clears
    what a previous run left: its archives for other jars, and files that a driver
    killed before it could publish them was writing."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = archive_path(directory, app_name, fingerprint(java, jars))
    ours = re.compile(
        re.escape(_prefix(app_name)) + r"[0-9a-f]{16}\.jsa(?:\.(\d+)\.(?:part|log))?$"
    )
    for old in directory.iterdir():
        match = ours.match(old.name)
        if match is None:
            continue
        writer = match.group(1)
        if (old != archive and writer is None) or (writer and not alive(int(writer))):
            old.unlink(missing_ok=True)
    exists = archive.is_file()
    writes = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    return Plan(archive, None if exists else writes, java_options(archive, exists, writes))


def publish(plan_: Plan, jvm: subprocess.Popen[bytes], timeout: float = EXIT_WAIT_SECONDS) -> bool:
    """Once the driver is done with Spark: end its JVM (PySpark's gateway exits when its
    stdin closes), wait while it writes the archive, and move the archive into place.
    True if an archive was published."""
    if plan_.writes is None:
        return False
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("the Spark JVM did not exit within %.0f s: no class archive this run", timeout)
        return False
    if jvm.returncode != 0 or not plan_.writes.is_file():
        plan_.writes.unlink(missing_ok=True)
        return False
    # Silently: this runs at the interpreter's exit, when a test runner may already have
    # closed the streams its log handlers write to.
    os.replace(plan_.writes, plan_.archive)
    plan_.writes.with_suffix(".log").unlink(missing_ok=True)
    return True
