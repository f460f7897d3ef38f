"""Benchmark results as JSON in docs/bench/, one file per benchmark; bench/report.py renders them.

Every figure is a ratio to a peer (another implementation, same work, same run) or a floor
(the least the work can cost here, same run), so the report compares runs from a busy,
shared machine by their ratios, not their absolute numbers. Use it from a benchmark
(a module of the `bench` package, run as `python -m bench.NAME`):

    from bench import harness, results

    parser = harness.parser(__doc__, "producer_clients")  # --json PATH, --no-json
    args = parser.parse_args()
    ...  # measure; keep the raw per-round numbers
    figures = [
        results.vs_peer("confluent-kafka", 240_000, "events/s", "kafka-python", 24_000,
                        goal=results.Goal(">=", 1.0, "the client the project chose is faster")),
        results.vs_floor("HTTP p50", 6.1, "ms", "cassandra-driver p50", 2.3),
        results.baseline("kafka-python", 24_000, "events/s"),  # shown, no ratio
    ]
    results.write(args, "producer_clients", figures, runs=[{"round": 1, ...}],
                  notes="2 rounds instead of 3: ...")

`write` records the commit (and whether tracked files were modified), the time, the
machine (cores, memory, CPU, OS, Python, Java, Spark/Kafka/Cassandra/Delta versions from
infra/jars/*/pom.xml, confluent-kafka/librdkafka), the load average and the command line
with its arguments; `--no-json` skips writing (quick experiments must not overwrite the
committed report). The ratio is value / the peer's or floor's value; a goal says which
side of a ratio counts as met (">=": throughput-like, "<=": cost-like). The first figure
with a ratio is the benchmark's headline in the report's summary table: put it first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from bench.revisions import PROJECT_ROOT, git

DOCS_BENCH = PROJECT_ROOT / "docs" / "bench"

Op = Literal[">=", "<="]


@dataclass(frozen=True)
class Goal:
    """A ratio to reach: ">=" (more is better) or "<=" (less is better), and its source."""

    op: Op
    ratio: float
    source: str = ""

    def met(self, ratio: float) -> bool:
        return ratio >= self.ratio if self.op == ">=" else ratio <= self.ratio


@dataclass(frozen=True)
class Figure:
    """One measured figure; `reference` names its peer or floor (kind says which)."""

    name: str
    value: float
    unit: str
    kind: Literal["peer", "floor", "baseline"] = "baseline"
    reference: str | None = None
    reference_value: float | None = None
    goal: Goal | None = None

    @property
    def ratio(self) -> float | None:
        if self.reference_value is None:
            return None
        if self.reference_value == 0:
            raise ValueError(f"figure {self.name!r}: its {self.kind} {self.reference!r} is 0")
        return self.value / self.reference_value

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": self.value, "unit": self.unit}
        ratio = self.ratio
        if self.kind != "baseline":
            out[self.kind] = self.reference
            out[f"{self.kind}_value"] = self.reference_value
            out["ratio"] = ratio
        if self.goal is not None and ratio is not None:
            out["goal"] = {**asdict(self.goal), "met": self.goal.met(ratio)}
        return out


def vs_peer(
    name: str, value: float, unit: str, peer: str, peer_value: float, goal: Goal | None = None
) -> Figure:
    """A figure compared with a peer's figure of the same unit, measured in the same run."""
    return Figure(name, value, unit, "peer", peer, peer_value, goal)


def vs_floor(
    name: str, value: float, unit: str, floor: str, floor_value: float, goal: Goal | None = None
) -> Figure:
    """A figure compared with its floor (the least the same work costs), same run."""
    return Figure(name, value, unit, "floor", floor, floor_value, goal)


def baseline(name: str, value: float, unit: str) -> Figure:
    """A figure shown without a ratio (typically the peer or floor itself)."""
    return Figure(name, value, unit)


@dataclass(frozen=True)
class Commit:
    sha: str
    dirty: bool
    modified: list[str] = field(default_factory=list)


def add_json_argument(parser: argparse.ArgumentParser, benchmark: str) -> None:
    """--json PATH (default docs/bench/<benchmark>.json) and --no-json."""
    parser.add_argument(
        "--json",
        type=Path,
        default=DOCS_BENCH / f"{benchmark}.json",
        metavar="PATH",
        help=f"where to write the results (default: docs/bench/{benchmark}.json; "
        "bench/report.py renders docs/bench/)",
    )
    parser.add_argument(
        "--no-json", action="store_true", help="do not write the results file (experiments)"
    )


def write(
    args: argparse.Namespace,
    benchmark: str,
    figures: list[Figure],
    runs: list[dict[str, Any]],
    notes: str = "",
) -> Path | None:
    """Write the results file named by args.json (unless args.no_json); returns its path."""
    if getattr(args, "no_json", False):
        return None
    path: Path = args.json
    params = {k: _jsonable(v) for k, v in vars(args).items() if k not in ("json", "no_json")}
    doc = document(benchmark, figures, runs, notes, params, git_commit(), machine())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)  # a reader never sees half a file
    print(f"results: {path}", flush=True)
    return path


def document(
    benchmark: str,
    figures: list[Figure],
    runs: list[dict[str, Any]],
    notes: str,
    parameters: dict[str, Any],
    commit: Commit,
    machine_info: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document (pure, apart from the clock)."""
    return {
        "benchmark": benchmark,
        "commit": asdict(commit),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "parameters": parameters,
        "notes": notes,
        "machine": machine_info,
        # The machine is shared: how busy it was when the results were written.
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "figures": [f.to_json() for f in figures],
        "runs": runs,
    }


def git_commit() -> Commit:
    sha = git("rev-parse", "HEAD").strip() or "unknown"
    # Tracked files only: the checkout is shared, untracked files of others say nothing.
    changed = modified_paths(git("status", "--porcelain", "--untracked-files=no"))
    return Commit(sha, bool(changed), changed[:30])


def modified_paths(porcelain: str) -> list[str]:
    """Paths from `git status --porcelain` lines ("XY path"; X or Y may be a space)."""
    return [line[3:] for line in porcelain.splitlines() if len(line) > 3]


def machine() -> dict[str, Any]:
    """Where the run happened: hardware, OS and the runtimes' versions."""
    poms = PROJECT_ROOT / "infra" / "jars"
    return {
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "cpu": _cpuinfo("model name") or platform.processor() or platform.machine(),
        "os": _os_name(),
        "python": platform.python_version(),
        "java": _java_version(),
        "spark": _pom_version(poms / "spark" / "pom.xml", "spark.version"),
        "kafka": _pom_version(poms / "kafka" / "pom.xml", "kafka.version"),
        "cassandra": _pom_version(poms / "cassandra" / "pom.xml", "cassandra-all"),
        "delta": _pom_version(poms / "spark" / "pom.xml", "delta-spark_2.12"),
        "confluent_kafka": _confluent_kafka_version(),
    }


def load(path: Path) -> dict[str, Any]:
    """Read one results file, with a clear error when it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON results file: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    required = ("benchmark", "commit", "measured_at", "machine", "figures")
    missing = [k for k in required if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)} (written by bench/results.py?)")
    return doc


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, str | int | float | bool | type(None)) else str(v)


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpuinfo(key: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))} ({platform.release()})"
    except OSError:
        pass
    return platform.platform()


def _java_version() -> str | None:
    try:
        from pos_lambda.adapters.java import find_java17
        from pos_lambda.settings import load_settings

        java = find_java17(load_settings().java_home)
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
        return out.stderr.splitlines()[0] if out.stderr else None
    except Exception:  # the report still says the rest of the machine
        return None


def _pom_version(pom: Path, name: str) -> str | None:
    """A <properties> entry, or the version of the dependency with that artifactId."""
    try:
        root = ET.parse(pom).getroot()
    except (OSError, ET.ParseError):
        return None
    ns = {"m": root.tag.split("}")[0].strip("{")} if root.tag.startswith("{") else {}
    p = "m:" if ns else ""
    prop = root.find(f"{p}properties/{p}{name}", ns)
    if prop is not None and prop.text:
        return prop.text.strip()
    for dep in root.iterfind(f".//{p}dependency", ns):
        if dep.findtext(f"{p}artifactId", namespaces=ns) == name:
            return dep.findtext(f"{p}version", namespaces=ns)
    return None


def _confluent_kafka_version() -> str | None:
    try:
        import confluent_kafka

        version: Any = confluent_kafka.version()  # a (str, int) tuple or, in newer ones, a str
        client = version if isinstance(version, str) else version[0]
        return f"{client} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        return None
