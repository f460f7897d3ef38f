"""Which archive a driver's JVM maps or writes, and what is cleared (spark_class_archive.py).

The JVM's side (that it writes and maps the archive) is tested against a real Spark
driver in tests/integration/test_class_archive.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pos_lambda.adapters import spark_class_archive as class_archive


def _jars(tmp_path: Path) -> list[Path]:
    jars = [tmp_path / "jars" / "a.jar", tmp_path / "jars" / "b.jar"]
    for jar in jars:
        jar.parent.mkdir(exist_ok=True)
        jar.write_bytes(b"jar " + jar.name.encode())
    return jars


def test_fingerprint_changes_with_any_jar_and_not_with_their_order(tmp_path: Path) -> None:
    java = Path(sys.executable)  # any file stands for the java binary here
    jars = _jars(tmp_path)
    before = class_archive.fingerprint(java, jars)
    assert class_archive.fingerprint(java, reversed(jars)) == before
    assert len(before) == 16
    jars[1].write_bytes(b"a newer jar, another size")
    assert class_archive.fingerprint(java, jars) != before
    assert class_archive.fingerprint(java, jars[:1]) != class_archive.fingerprint(java, jars)


def test_options_map_an_archive_or_write_one_at_exit() -> None:
    archive, writes = (
        Path("/c/pos-speed-views-0123.jsa"),
        Path("/c/pos-speed-views-0123.jsa.7.part"),
    )
    assert class_archive.java_options(archive, True, writes) == (
        "-XX:SharedArchiveFile=/c/pos-speed-views-0123.jsa",
        "-Xlog:cds*=off",  # not on stdout, the driver's own output
        "-Xlog:cds*=warning:stderr",
    )
    assert class_archive.java_options(archive, False, writes) == (
        "-XX:ArchiveClassesAtExit=/c/pos-speed-views-0123.jsa.7.part",
        "-Xlog:cds*=off",
        "-Xlog:cds*=warning:file=/c/pos-speed-views-0123.jsa.7.log",
    )


def test_agents_and_flight_recordings_rule_the_archive_out() -> None:
    clash = class_archive.clash
    assert clash("-XX:+UseParallelGC -javaagent:/opt/jmx_prometheus.jar=9404:c.yaml") == (
        "-javaagent:/opt/jmx_prometheus.jar=9404:c.yaml"
    )
    assert clash("", "-XX:StartFlightRecording=filename=a.jfr,settings=profile") == (
        "-XX:StartFlightRecording=filename=a.jfr,settings=profile"
    )
    assert clash("-XX:StartFlightRecording") == "-XX:StartFlightRecording"
    assert clash("-XX:+FlightRecorder") == "-XX:+FlightRecorder"
    assert clash("-agentpath:/opt/libyjpagent.so") == "-agentpath:/opt/libyjpagent.so"
    assert clash("-agentlib:foo=bar") == "-agentlib:foo=bar"
    # The debugger maps an archive; options that only mention an agent start none.
    assert clash("-agentlib:jdwp=transport=dt_socket,server=y,address=127.0.0.1:5005") is None
    assert clash("-agentlib:jdwp") is None
    assert clash("-XX:+UseParallelGC", "-Dnote=-javaagent:x.jar", "-XX:-FlightRecorder") is None
    assert clash() is None


def test_plan_writes_until_there_is_an_archive_then_maps_it(tmp_path: Path) -> None:
    java, jars, directory = Path(sys.executable), _jars(tmp_path), tmp_path / "archives"
    first = class_archive.plan(directory, "pos-speed-views", java, jars)
    assert first.writes == directory / f"{first.archive.name}.{os.getpid()}.part"
    assert first.archive.parent == directory and first.archive.name.startswith("pos-speed-views-")
    assert f"-XX:ArchiveClassesAtExit={first.writes}" in first.java_options
    first.archive.write_bytes(b"archive")
    second = class_archive.plan(directory, "pos-speed-views", java, jars)
    assert second.writes is None
    assert f"-XX:SharedArchiveFile={first.archive}" in second.java_options


def test_plan_clears_archives_of_other_jars_and_dead_writers_parts(tmp_path: Path) -> None:
    java, jars, directory = Path(sys.executable), _jars(tmp_path), tmp_path / "archives"
    directory.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    old_jars = directory / "pos-speed-views-00000000000000aa.jsa"
    killed_writer = directory / f"pos-speed-views-00000000000000bb.jsa.{dead_pid}.part"
    killed_log = directory / f"pos-speed-views-00000000000000bb.jsa.{dead_pid}.log"
    live_writer = directory / f"pos-speed-views-00000000000000cc.jsa.{os.getppid()}.part"
    other_app = directory / "pos-speed-views-x-00000000000000dd.jsa"
    unrelated = directory / "notes.txt"
    for f in (old_jars, killed_writer, killed_log, live_writer, other_app, unrelated):
        f.write_bytes(b"x")
    class_archive.plan(directory, "pos-speed-views", java, jars)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        p.name for p in (live_writer, other_app, unrelated)
    )


def test_publish_moves_the_archive_into_place_once_the_process_exits(tmp_path: Path) -> None:
    archive = tmp_path / "app-0123456789abcdef.jsa"
    writes = tmp_path / "app-0123456789abcdef.jsa.1.part"
    plan = class_archive.Plan(archive, writes, ())
    # Stands for PySpark's gateway JVM: runs until its stdin closes, then writes at exit.
    code = f"import sys; sys.stdin.read(); open({str(writes)!r}, 'wb').write(b'classes')"
    jvm = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    assert class_archive.publish(plan, jvm, timeout=60)
    assert archive.read_bytes() == b"classes"
    assert not writes.exists()


def test_publish_leaves_nothing_when_the_process_wrote_no_archive(tmp_path: Path) -> None:
    archive = tmp_path / "app-0123456789abcdef.jsa"
    plan = class_archive.Plan(archive, tmp_path / "app-0123456789abcdef.jsa.1.part", ())
    jvm = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"], stdin=subprocess.PIPE)
    assert not class_archive.publish(plan, jvm, timeout=60)
    assert list(tmp_path.iterdir()) == []
    mapped = class_archive.Plan(archive, None, ())
    assert not class_archive.publish(mapped, jvm, timeout=60)
