"""The package's layout rules, read from the code's own imports.

- Installing the project adds one top-level name, `pos_lambda`.
- Production code never imports the local development runtime (`pos_lambda.runtime`):
  the jobs reach Kafka, Cassandra and Spark through `pos_lambda.adapters` only. The
  demo and the chaos run drive the local runtime, so they may.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "pos_lambda"
MAY_IMPORT_RUNTIME = ("runtime", "demo")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_one_top_level_package_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = config["tool"]["setuptools"]["packages"]["find"]
    assert found == {"where": ["src"], "include": ["pos_lambda*"]}
    packages = [p.parent.name for p in (ROOT / "src").glob("*/__init__.py")]
    assert packages == ["pos_lambda"]


def test_production_code_never_imports_the_local_runtime() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        room = path.relative_to(PACKAGE).parts[0]
        if room in MAY_IMPORT_RUNTIME:
            continue
        bad = sorted(n for n in _imports(path) if n.startswith("pos_lambda.runtime"))
        if bad:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(bad)}")
    assert offenders == []


def test_the_rule_would_catch_an_offender(tmp_path: Path) -> None:
    module = tmp_path / "job.py"
    module.write_text("from pos_lambda.runtime import kafka_service\n")
    assert "pos_lambda.runtime.kafka_service" in _imports(module)
