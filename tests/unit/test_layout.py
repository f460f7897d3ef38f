"""The package's layout rules, read from the code's own imports and from a built wheel.

- Installing the project adds one top-level name, `pos_lambda`: the product only.
- The development package (dev/, `pos_lambda_dev`: the local runtime, the demo, the
  chaos run) is never imported by the product, with no exemption: the jobs reach Kafka,
  Cassandra and Spark through `pos_lambda.adapters`, and provision them through
  `pos_lambda.provision`.
- The product's wheel holds no demo or runtime module and no development command.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "pos_lambda"
DEV = ROOT / "dev"
DEV_PACKAGE = "pos_lambda_dev"
DEV_COMMANDS = {"pos-infra", "pos-demo", "pos-chaos"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _development(name: str) -> bool:
    return name == DEV_PACKAGE or name.startswith(
        (f"{DEV_PACKAGE}.", "pos_lambda.runtime", "pos_lambda.demo")
    )


def test_one_top_level_package_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = config["tool"]["setuptools"]["packages"]["find"]
    assert found == {"where": ["src"], "include": ["pos_lambda*"]}
    packages = [p.parent.name for p in (ROOT / "src").glob("*/__init__.py")]
    assert packages == ["pos_lambda"]


def test_the_product_holds_no_development_room() -> None:
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert not rooms & {"demo", "runtime"}


def test_the_product_never_imports_the_development_package() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        bad = sorted(n for n in _imports(path) if _development(n))
        if bad:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(bad)}")
    assert offenders == []


def test_the_commands_split_between_product_and_development_package() -> None:
    product = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    dev = tomllib.loads((DEV / "pyproject.toml").read_text())
    assert dev["project"]["name"] == "pos-lambda-dev"
    assert dev["tool"]["setuptools"]["packages"]["find"]["include"] == [f"{DEV_PACKAGE}*"]
    dev_scripts = dev["project"]["scripts"]
    assert set(dev_scripts) == DEV_COMMANDS
    assert not set(product) & DEV_COMMANDS
    assert all(target.startswith("pos_lambda.") for target in product.values())
    assert all(target.startswith(f"{DEV_PACKAGE}.") for target in dev_scripts.values())
    assert product["pos-provision"] == "pos_lambda.provision.cli:main"


def test_the_rule_would_catch_an_offender(tmp_path: Path) -> None:
    module = tmp_path / "job.py"
    module.write_text("from pos_lambda_dev.runtime import kafka_service\nimport pos_lambda_dev\n")
    assert {n for n in _imports(module) if _development(n)} == {
        "pos_lambda_dev",
        "pos_lambda_dev.runtime",
        "pos_lambda_dev.runtime.kafka_service",
    }


def _wheel_command(out: Path) -> list[str]:
    """`python -m build --wheel` where the build frontend is installed, else `pip wheel`
    (no dependencies: only the project's own wheel)."""
    if importlib.util.find_spec("build") is not None:
        return [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(ROOT)]


def test_the_wheel_holds_the_product_only(tmp_path: Path) -> None:
    """The wheel built from this checkout: `pos_lambda` and its package data, no demo
    or runtime module, no development command. Built from a copy of the sources
    (setuptools writes build/ and *.egg-info beside them); pip's isolated build fetches
    the pinned setuptools from the package index."""
    tree = tmp_path / "tree"
    skipped = (".git", ".venv", ".state", ".cache", "build", "*.egg-info", "__pycache__")
    skipped += (".mypy_cache", ".ruff_cache", ".pytest_cache", "dev", "tests", "bench", "docs")
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*skipped))
    out = tmp_path / "dist"
    command = [part if part != str(ROOT) else str(tree) for part in _wheel_command(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tree, timeout=600)
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(f"no wheel builder here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = out.glob("pos_lambda-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"pos_lambda", wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"}
    assert not [n for n in names if n.startswith(("pos_lambda/demo/", "pos_lambda/runtime/"))]
    assert not [n for n in names if DEV_PACKAGE in n]
    assert "pos_lambda/provision/cli.py" in names
    assert "pos_lambda/schemas/pos_transaction.v1.schema.json" in names  # package data
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "pos-serve = pos_lambda.serving.cli:main" in scripts
    assert not [c for c in DEV_COMMANDS if f"{c} =" in scripts]
