"""Find the JDK 17 that Kafka and Cassandra run on.

Cassandra 5.0 supports JDK 11 and 17 only; this machine also has a newer JDK on
which it refuses to start, so we never trust `java` on PATH blindly.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from pos_lambda.adapters.service import ServiceError

_CANDIDATES = (
    "/usr/lib/jvm/java-17-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-arm64",
    "/usr/lib/jvm/java-17-openjdk",
    "/usr/lib/jvm/temurin-17-jdk-amd64",
)


def java_major(java: Path) -> int | None:
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def find_java17(java_home: Path | None) -> Path:
    """The `java` binary of a JDK 17; `java_home` (POS_JAVA_HOME) wins if given."""
    homes: list[Path] = []
    if java_home is not None:
        homes.append(java_home)
    elif os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    homes += [Path(p) for p in _CANDIDATES]
    for home in homes:
        java = home / "bin" / "java"
        if java.exists() and java_major(java) == 17:
            return java
    raise ServiceError(
        "OpenJDK 17 not found (Cassandra 5.0 does not run on newer JDKs). Install it "
        "(Debian: `apt-get install openjdk-17-jdk-headless`) or point POS_JAVA_HOME at it. "
        f"Looked in: {', '.join(str(h) for h in homes)}"
    )
