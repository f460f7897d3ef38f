"""Every test file belongs to a layer (`make test-speed`, `test-batch`, `test-serving`,
`test-processors`) or says it belongs to none ("other"): LAYERS in tests/conftest.py. A
new file that matches nothing fails here, instead of silently leaving every layer's run.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LAYERS, LONGEST_FIRST, TESTS, layers_of, longest_first


def collected_files() -> list[Path]:
    """The files pytest collects tests from (its default `python_files`)."""
    return sorted({*TESTS.rglob("test_*.py"), *TESTS.rglob("*_test.py")})


def test_every_test_file_is_in_a_layer_or_other() -> None:
    files = collected_files()
    assert len(files) > 150, files
    nowhere = [f.relative_to(TESTS).as_posix() for f in files if not layers_of(f)]
    assert not nowhere, (
        f"add these to a layer or to 'other' in LAYERS (tests/conftest.py): {nowhere}"
    )


def test_other_means_no_layer() -> None:
    both = {
        f.relative_to(TESTS).as_posix(): layers
        for f in collected_files()
        if "other" in (layers := layers_of(f)) and len(layers) > 1
    }
    assert not both, f"in a layer and in 'other': {both}"


def test_every_file_named_exists() -> None:
    """A renamed or deleted file leaves no stale name behind (a pattern with a wildcard
    is a rule for files to come, and may match none yet)."""
    names = {f.relative_to(TESTS).as_posix() for f in collected_files()}
    stale = [(layer, g) for layer, globs in LAYERS.items() for g in globs
             if not any(c in g for c in "*?[") and g not in names]  # fmt: skip
    assert not stale, stale


def test_each_layer_has_unit_and_integration_tests() -> None:
    for layer in ("speed", "batch", "serving", "processors"):
        dirs = {f.relative_to(TESTS).parts[0] for f in collected_files() if layer in layers_of(f)}
        assert {"unit", "integration"} <= dirs, (layer, dirs)


def test_what_a_few_files_touch() -> None:
    assert layers_of(TESTS / "unit/views/test_winners.py") == ["speed", "batch"]
    assert layers_of(TESTS / "integration/test_speed_layer.py") == ["speed"]
    assert layers_of(TESTS / "integration/test_batch_airflow.py") == ["batch"]
    assert layers_of(TESTS / "unit/serving/test_merge.py") == ["serving"]
    assert layers_of(TESTS / "integration/test_alerts_eos.py") == ["processors"]
    assert layers_of(TESTS / "unit/transactional/test_exactly_once_properties.py") == ["processors"]
    assert layers_of(TESTS / "unit/producer/test_ledger.py") == ["other"]
    assert layers_of(TESTS / "e2e/test_chaos.py") == ["other"]
    assert layers_of(TESTS.parent / "bench" / "test_outside.py") == []  # not a test file of ours


def test_the_longest_files_named_exist_and_go_first() -> None:
    """LONGEST_FIRST (the order `make test` deals files to its workers) names files that
    exist; longest_first puts them first, longest first, each file's tests in their order,
    and leaves the others in the order collected."""
    names = {f.relative_to(TESTS).as_posix() for f in collected_files()}
    assert not set(LONGEST_FIRST) - names, sorted(set(LONGEST_FIRST) - names)

    class Item:
        def __init__(self, path: str, name: str) -> None:
            self.path, self.name = TESTS / path, name

    items = [
        Item("integration/test_runtime.py", "a"),
        Item("integration/test_speed_restart.py", "b"),  # 95 s
        Item("integration/test_runtime.py", "c"),
        Item("integration/test_batch_layer.py", "d"),  # 300 s
        Item("integration/test_batch_layer.py", "e"),
        Item("integration/test_audit.py", "f"),  # 80 s
        Item("integration/test_alerts_sink.py", "g"),
    ]
    longest_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["d", "e", "b", "f", "a", "c", "g"]
