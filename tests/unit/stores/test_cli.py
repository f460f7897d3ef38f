"""`pos-stores add|set|list` over the in-memory registry: output, errors, exit codes."""

from __future__ import annotations

import json

import pytest

from pos_lambda.stores import cli
from pos_lambda.stores.registry import InMemoryStores


@pytest.fixture
def registry() -> InMemoryStores:
    return InMemoryStores()


def _run(registry: InMemoryStores, *argv: str) -> int:
    return cli.main(list(argv), lambda: registry)


ADD_KATHMANDU = ("add", "101", "--name", "Thamel", "--zone", "Asia/Kathmandu",
                 "--hours", "mon-fri=07:00-21:00", "--hours", "sat=08:00-14:00")  # fmt: skip


def test_add_then_list_as_table_and_json(
    registry: InMemoryStores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(registry, *ADD_KATHMANDU) == 0
    capsys.readouterr()
    assert _run(registry, "list") == 0
    assert capsys.readouterr().out.splitlines() == [
        "operation_id  name    time_zone       mon          tue          wed          thu"
        "          fri          sat          sun",
        "101           Thamel  Asia/Kathmandu  07:00-21:00  07:00-21:00  07:00-21:00  07:00-21:00"
        "  07:00-21:00  08:00-14:00  closed",
    ]
    assert _run(registry, "list", "--json") == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "operation_id": 101,
            "name": "Thamel",
            "time_zone": "Asia/Kathmandu",
            "opening_hours": {
                "mon": "07:00-21:00", "tue": "07:00-21:00", "wed": "07:00-21:00",
                "thu": "07:00-21:00", "fri": "07:00-21:00", "sat": "08:00-14:00",
                "sun": "closed",
            },
        }
    ]  # fmt: skip


def test_set_changes_only_what_it_is_given(
    registry: InMemoryStores, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(registry, *ADD_KATHMANDU)
    assert _run(registry, "set", "101", "--hours", "sun=10:00-14:00") == 0
    store = registry.get(101)
    assert store is not None
    assert store.opening_hours()["sun"] == "10:00-14:00"
    assert store.opening_hours()["mon"] == "07:00-21:00"
    assert store.time_zone == "Asia/Kathmandu"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (("add", "7", "--name", "x", "--zone", "Mars/Olympus", "--hours", "daily=08:00-20:00"),
         2, "pos-stores add: time zone 'Mars/Olympus' is unknown"),
        (("add", "7", "--name", "x", "--zone", "UTC", "--hours", "mon=22:00-02:00"),
         2, "overnight hours are not supported"),
        (("add", "7", "--name", "x", "--zone", "UTC", "--hours", "funday=08:00-20:00"),
         2, "'funday' is not a weekday"),
        (("set", "999", "--zone", "UTC"), 3, "pos-stores set: store 999 is not registered"),
        (ADD_KATHMANDU, 2, "store 101 is registered already"),
        (("set", "101"), 2, "nothing to change"),
        (("set", "101", "--zone", "Europe/Bratislav"), 2, "'Europe/Bratislav' is unknown"),
    ],
)  # fmt: skip
def test_errors_are_one_line_with_a_non_zero_exit(
    registry: InMemoryStores,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    code: int,
    says: str,
) -> None:
    _run(registry, *ADD_KATHMANDU)
    capsys.readouterr()
    assert _run(registry, *argv) == code
    err = capsys.readouterr().err
    assert says in err
    assert err.count("\n") == 1
    assert registry.get(101) is not None and registry.get(101).time_zone == "Asia/Kathmandu"  # type: ignore[union-attr]
    assert registry.get(7) is None


@pytest.mark.parametrize(
    "argv", [["--help"], ["add", "--help"], ["set", "--help"], ["list", "--help"]]
)
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv, InMemoryStores)
    assert exit_.value.code == 0
    assert "usage: pos-stores" in capsys.readouterr().out
