"""The Python workers' daemon keeps zip archives' directories as read."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

# Run in a child process: the change is to the interpreter's zip importer class.
_CHILD = """
import sys, zipfile, zipimport
from pos_lambda.adapters import spark_python_daemon
archive = sys.argv[1]
importer = zipimport.zipimporter(archive)
if sys.argv[2] == "daemon":
    spark_python_daemon.keep_archive_directories()
assert spark_python_daemon.keeps_archive_directories() == (sys.argv[2] == "daemon")
with zipfile.ZipFile(archive, "a") as z:
    z.writestr("added.py", "")
importer.invalidate_caches()
print(importer.find_spec("added") is not None)
"""


def _added_module_seen(tmp_path: Path, mode: str) -> bool:
    archive = tmp_path / f"{mode}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first.py", "")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(archive), mode],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip() == "True"


def test_invalidation_rereads_an_archive_unless_the_daemon_keeps_it(tmp_path: Path) -> None:
    # Plain Python 3.11 re-reads the archive's directory at once (the cost per task)...
    assert _added_module_seen(tmp_path, "plain")
    # ...the daemon's workers keep the directory they read.
    assert not _added_module_seen(tmp_path, "daemon")


def test_the_collection_after_each_task_is_of_the_young_generations() -> None:
    import gc
    import types

    from pos_lambda.adapters.spark_python_daemon import collect_young_generations

    daemon = types.ModuleType("stand_in_daemon")  # PySpark's daemon calls `gc.collect()`
    daemon.gc = gc  # type: ignore[attr-defined]
    generations: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.disable()  # only the collections asked for below
    gc.callbacks.append(record)
    try:
        daemon.gc.collect()  # type: ignore[attr-defined]
        collect_young_generations(daemon)
        daemon.gc.collect()  # type: ignore[attr-defined]
    finally:
        gc.callbacks.remove(record)
        if was_enabled:
            gc.enable()
    assert generations == [2, 1]  # PySpark's full collection, then the young ones only
