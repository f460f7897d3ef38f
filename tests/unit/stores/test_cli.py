"""`pos-stores add|set|list` over the in-memory registry: output, errors, exit codes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pos_lambda.stores import cli
from pos_lambda.stores import registry as registry_module
from pos_lambda.stores.model import Store
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


class _HandBroken(InMemoryStores):
    """Store 555's row edited by hand into an overnight Monday: it reads back through the
    Cassandra adapter's own row check (`registry._store`), as `CassandraStores.get` does,
    until something is put there."""

    def get(self, operation_id: int) -> Store | None:
        if operation_id == 555 and super().get(555) is None:
            row = SimpleNamespace(operation_id=555, name="Night owl", time_zone="UTC",
                                  opening_hours={"mon": "22:00-02:00"})  # fmt: skip
            return registry_module._store(row)
        return super().get(operation_id)


BROKEN_555 = (
    "the stores table's row of store 555 is broken (hours of mon: '22:00-02:00' closes before "
    "it opens: overnight hours are not supported, split them at midnight (fri=18:00-24:00 and "
    "sat=00:00-02:00)), so it cannot be changed field by field: rewrite it whole with "
    "pos-stores set 555 --repair --name ... --zone ... --hours ... (days not named are closed)"
)


@pytest.mark.parametrize(
    "argv",
    [
        ("set", "555", "--hours", "mon=22:00-24:00"),
        ("add", "555", "--name", "Night owl", "--zone", "UTC", "--hours", "mon=22:00-24:00"),
    ],
)
def test_a_broken_row_is_refused_naming_the_repair(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _HandBroken()
    assert _run(broken, *argv) == 5
    assert capsys.readouterr().err == f"pos-stores {argv[0]}: {BROKEN_555}\n"


def test_set_repair_rewrites_the_row_whole_without_reading_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broken = _HandBroken()
    assert _run(broken, "set", "555", "--repair", "--name", "Night owl", "--zone", "UTC",
                "--hours", "mon=22:00-24:00", "--hours", "tue=00:00-02:00") == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines()[0] == (
        "repaired store 555 (its row rewritten whole):"
    )
    store = broken.get(555)
    assert store is not None
    assert (store.name, store.time_zone, store.opening_hours()) == ("Night owl", "UTC", {
        "mon": "22:00-24:00", "tue": "00:00-02:00", "wed": "closed", "thu": "closed",
        "fri": "closed", "sat": "closed", "sun": "closed",
    })  # fmt: skip


def test_set_repair_asks_for_the_whole_row(
    registry: InMemoryStores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(registry, "set", "555", "--repair", "--zone", "UTC") == 2
    assert capsys.readouterr().err == (
        "pos-stores set: --repair rewrites the row whole, keeping nothing of it: give "
        "--name, --hours too (days not named in --hours are closed)\n"
    )
    assert registry.get(555) is None
