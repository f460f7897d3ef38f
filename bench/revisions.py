"""Another revision's code to run beside this checkout's (a benchmark's `--baseline REV`
or `--vs REV`), whichever layout that revision has.

The project has had two layouts, and a benchmark may compare with a revision of either:

- code at the root: top-level packages (`speed_layer`, `infra`, `batch_layer`, ...),
  run as `python -m speed_layer.cli` with the tree itself on PYTHONPATH;
- one root package under src/ (`src/pos_lambda`): `python -m pos_lambda.speed_layer.cli`
  with the tree's src/ on PYTHONPATH.

Its benchmarks too: a plain script beside the others (`python bench/NAME.py`, its folder
first on sys.path), or the `bench` package (`python -m bench.NAME` from the tree's root).

    with code_at("HEAD~1") as (name, tree):
        argv, cwd = pipeline("pos-speed", "run", "--available-now", tree=tree)
        subprocess.run(argv, cwd=cwd, env=code_env(tree), check=True)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# The console scripts the benchmarks run as processes: their modules in each layout
# (under src/pos_lambda, at the root). `pos-provision schema` was `pos-infra schema`
# before the local runtime left the package (src trees without pos_lambda/provision).
MODULES = {
    "pos-speed": ("pos_lambda.speed_layer.cli", "speed_layer.cli"),
    "pos-provision": ("pos_lambda.provision.cli", "infra.cli"),
    "pos-batch": ("pos_lambda.batch_layer.cli", "batch_layer.cli"),
}
BEFORE_PROVISION = {"pos-provision": "pos_lambda.runtime.cli"}


@dataclass(frozen=True)
class Layout:
    """Where a tree of the project keeps its code, and how to run it."""

    root: Path
    src: bool  # the code is the package src/pos_lambda (else top-level packages at the root)

    @property
    def pythonpath(self) -> Path:
        """What goes first on PYTHONPATH to import the tree's code."""
        return self.root / "src" if self.src else self.root

    @property
    def code(self) -> Path:
        """The folder holding the code's packages (speed_layer, batch_layer, views, ...)."""
        return self.root / "src" / "pos_lambda" if self.src else self.root

    def module(self, command: str) -> str:
        """The module of a console script (`pos-speed`, `pos-provision`, `pos-batch`)."""
        try:
            in_src, at_root = MODULES[command]
        except KeyError:
            raise ValueError(f"{command!r}: not one of {', '.join(MODULES)}") from None
        if not self.src:
            return at_root
        if command in BEFORE_PROVISION and not (self.code / "provision").is_dir():
            return BEFORE_PROVISION[command]
        return in_src

    def bench(self, name: str) -> list[str]:
        """The command (after the interpreter) that runs the tree's benchmark `name`, from
        the tree's root: the package's module, or the script of a tree from before it."""
        if (self.root / "bench" / "__init__.py").is_file():
            return ["-m", f"bench.{name}"]
        return [str(self.root / "bench" / f"{name}.py")]


def layout(tree: Path) -> Layout:
    """The layout of a checkout of the project: src/pos_lambda present or not."""
    if (tree / "src" / "pos_lambda" / "__init__.py").is_file():
        return Layout(tree, src=True)
    if (tree / "speed_layer").is_dir():
        return Layout(tree, src=False)
    raise ValueError(f"{tree}: neither src/pos_lambda nor speed_layer/: not a project tree")


def pipeline(command: str, *args: str, tree: Path | None = None) -> tuple[list[str], Path]:
    """(argv, working directory) that run a console script's module of the tree's code
    (None: this checkout's). In the tree's directory: `python -m` puts the working
    directory first on sys.path, so the tree's modules win over this checkout's."""
    found = layout(tree or PROJECT_ROOT)
    return [sys.executable, "-m", found.module(command), *args], found.root


def bench(name: str, *args: str, tree: Path | None = None) -> tuple[list[str], Path]:
    """(argv, working directory) that run benchmark `name` of the tree (None: this one)."""
    found = layout(tree or PROJECT_ROOT)
    return [sys.executable, *found.bench(name), *args], found.root


def code_env(tree: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (`env`, default this process's) that runs `tree`'s code (None:
    this checkout's) ahead of this checkout's editable install, with this checkout's jars
    and service state: another revision's tree has neither of its own."""
    from pos_lambda.settings import load_settings

    here = load_settings()
    return {**(os.environ if env is None else env),
            "PYTHONPATH": str(layout(tree or PROJECT_ROOT).pythonpath),
            "POS_JARS_DIR": str(here.jars_dir), "POS_STATE_DIR": str(here.state_dir)}  # fmt: skip


def git(*cmd: str, strict: bool = False) -> str:
    """`git cmd...` in this checkout: its output; strict: a failure stops the benchmark."""
    done = subprocess.run(["git", *cmd], cwd=PROJECT_ROOT, capture_output=True, text=True)
    if strict and done.returncode:
        raise SystemExit(f"git {' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


@contextmanager
def code_at(rev: str) -> Iterator[tuple[str, Path]]:
    """(a name for it, a detached worktree of `rev`), removed on exit: another
    revision's code to run beside this checkout's. The tree has no jars or state of its
    own: run it with code_env."""
    commit = git("rev-parse", "--short", f"{rev}^{{commit}}", strict=True).strip()
    name = f"code at {commit}" + (f" ({rev})" if rev != commit else "")
    tree = Path(tempfile.mkdtemp(prefix="pos-bench-baseline-")) / "tree"
    git("worktree", "add", "--detach", str(tree), commit, strict=True)
    try:
        yield name, tree
    finally:
        git("worktree", "remove", "--force", str(tree), strict=True)
