"""bench/revisions.py: another revision's code, in either layout the project has had
(top-level packages at the root; one package under src/pos_lambda), and its benchmarks
(scripts, or the `bench` package)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import revisions

ROOT = Path(__file__).resolve().parents[3]


def _git(*cmd: str) -> str:
    done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _tree(root: Path, *files: str) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


def test_a_src_tree_runs_pos_lambda_modules_from_its_src(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "src/pos_lambda/__init__.py", "bench/__init__.py")
    found = revisions.layout(tree)
    assert found.src is True
    assert found.pythonpath == tmp_path / "src"
    assert found.code == tmp_path / "src" / "pos_lambda"
    assert found.module("pos-speed") == "pos_lambda.speed_layer.cli"
    assert found.module("pos-provision") == "pos_lambda.runtime.cli"  # before provision/
    assert found.module("pos-batch") == "pos_lambda.batch_layer.cli"
    argv, cwd = revisions.pipeline("pos-speed", "run", "--available-now", tree=tree)
    assert argv == [sys.executable, "-m", "pos_lambda.speed_layer.cli", "run", "--available-now"]
    assert cwd == tmp_path
    assert revisions.bench("plain_consumer", "--topic", "t", tree=tree) == (
        [sys.executable, "-m", "bench.plain_consumer", "--topic", "t"],
        tmp_path,
    )


def test_a_src_tree_with_provision_runs_its_schema_there(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "src/pos_lambda/__init__.py", "src/pos_lambda/provision/cli.py")
    assert revisions.layout(tree).module("pos-provision") == "pos_lambda.provision.cli"


def test_a_tree_from_before_src_runs_its_top_level_modules(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "speed_layer/__init__.py", "infra/__init__.py", "bench/results.py")
    found = revisions.layout(tree)
    assert found.src is False
    assert found.pythonpath == tmp_path
    assert found.code == tmp_path
    assert found.module("pos-speed") == "speed_layer.cli"
    assert found.module("pos-provision") == "infra.cli"
    assert found.module("pos-batch") == "batch_layer.cli"
    # Its benchmarks were scripts beside each other: run by path, their folder first.
    assert revisions.bench("speed_micro_batch", "--child", tree=tree) == (
        [sys.executable, str(tmp_path / "bench" / "speed_micro_batch.py"), "--child"],
        tmp_path,
    )


def test_a_src_tree_whose_benchmarks_are_still_scripts(tmp_path: Path) -> None:
    # The revisions between the src/ move and the bench package.
    tree = _tree(tmp_path, "src/pos_lambda/__init__.py", "bench/results.py")
    assert revisions.layout(tree).src is True
    argv, _ = revisions.bench("batch_recompute", tree=tree)
    assert argv == [sys.executable, str(tmp_path / "bench" / "batch_recompute.py")]


def test_what_is_no_project_tree_or_command_is_said(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither src/pos_lambda nor speed_layer/"):
        revisions.layout(tmp_path)
    with pytest.raises(ValueError, match="'pos-nothing': not one of pos-speed, pos-provision"):
        revisions.layout(_tree(tmp_path, "speed_layer/x.py")).module("pos-nothing")


def test_this_checkout_runs_its_own_package() -> None:
    assert revisions.layout(ROOT) == revisions.Layout(ROOT, src=True)
    argv, cwd = revisions.bench("report", "--dir", "x")
    assert (argv, cwd) == ([sys.executable, "-m", "bench.report", "--dir", "x"], ROOT)
    assert revisions.code_env(None, {})["PYTHONPATH"] == str(ROOT / "src")


def _imported_from(tree: Path, module: str) -> Path:
    """Where `module` comes from in a process run as the benchmarks run a tree's code."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}; print({module}.__file__)"],
        cwd=revisions.layout(tree).root, env=revisions.code_env(tree),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(done.stdout.strip()).resolve()


def test_code_at_a_revision_is_a_worktree_of_it_whose_code_runs_removed_afterwards() -> None:
    short = _git("rev-parse", "--short", "HEAD~1")
    with revisions.code_at("HEAD~1") as (name, tree):
        assert name == f"code at {short} (HEAD~1)"
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
        assert head == short
        # The tree's package, not this checkout's editable install of the same name.
        assert revisions.code_env(tree, {})["PYTHONPATH"] == str(tree / "src")
        assert _imported_from(tree, "pos_lambda") == (tree / "src/pos_lambda/__init__.py").resolve()
    assert not tree.exists()
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True)
    assert str(tree) not in listed.stdout


def test_a_revision_from_before_src_runs_its_own_commands() -> None:
    moved = _git("log", "--diff-filter=A", "--format=%h", "--", "src/pos_lambda/__init__.py")
    if not moved:
        pytest.skip("the history of the src/ move is not in this clone")
    with revisions.code_at(f"{moved.splitlines()[-1]}^") as (_, tree):
        assert revisions.layout(tree).src is False
        assert _imported_from(tree, "speed_layer") == (tree / "speed_layer/__init__.py").resolve()
        argv, cwd = revisions.pipeline("pos-speed", "--help", tree=tree)
        done = subprocess.run(argv, cwd=cwd, env=revisions.code_env(tree),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: pos-speed")


def test_code_at_an_unknown_revision_stops_with_gits_reason() -> None:
    with pytest.raises(SystemExit, match="rev-parse"), revisions.code_at("no-such-revision"):
        pass
