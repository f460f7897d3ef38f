"""Fetch the runtime jars from Maven Central into the jar cache, once.

Each folder under infra/jars/ holds a pom.xml whose dependencies are one runtime's
classpath (kafka, cassandra, spark). `mvn dependency:copy-dependencies` copies
them into `<jars_dir>/<name>/`; a stamp holding the pom's hash makes a second run
free and a changed pom refetch. Maven's own repository (~/.m2) is the download
cache underneath, so a refetch is local.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import PROJECT_ROOT, Settings

POMS_DIR = PROJECT_ROOT / "infra" / "jars"
RUNTIMES = ("kafka", "cassandra", "spark")


def _stamp(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def fetch(settings: Settings, names: tuple[str, ...] = RUNTIMES) -> list[str]:
    """Fetch the named runtimes whose cache is missing or stale; returns what was fetched."""
    mvn = shutil.which("mvn")
    fetched = []
    for name in names:
        pom = POMS_DIR / name / "pom.xml"
        out = settings.jars_dir / name
        stamp = out / ".stamp"
        if stamp.exists() and stamp.read_text() == _stamp(pom):
            continue
        if mvn is None:
            raise ServiceError(
                "Maven (`mvn`) not found: install it (Debian: apt-get install maven)."
            )
        print(f"jars: fetching {name} runtime into {out} ...", file=sys.stderr, flush=True)
        if out.exists():
            shutil.rmtree(out)
        done = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={out}",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ServiceError(
                f"jars: Maven could not fetch the {name} runtime (is Maven Central "
                f"reachable?):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
            )
        stamp.write_text(_stamp(pom))
        fetched.append(name)
    return fetched
