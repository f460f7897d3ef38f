"""docs/serving.md shows the CQL cookbook verbatim, and every pos-serve command has --help."""

from __future__ import annotations

import pytest

from pos_lambda.serving import cli, cookbook
from pos_lambda.settings import PROJECT_ROOT


def test_serving_page_shows_the_cookbook_verbatim() -> None:
    assert cookbook.markdown() in (PROJECT_ROOT / "docs" / "serving.md").read_text()


def test_each_view_has_a_recipe() -> None:
    text = "\n".join(cookbook.statements(cookbook.EXAMPLE))
    views = "receipts_by_store_day agg_15m_speed batch_views agg_15m_batch batch_runs"
    others = ("batch_fixes", "conflicts", "dead_letters", "speed_progress", "receipt_keys")
    for table in (*views.split(), *others):
        assert f"pos.{table} WHERE" in text, table


@pytest.mark.parametrize(
    "command",
    [
        "windows",
        "days",
        "local-days",
        "hour-of-week",
        "week-before",
        "top",
        "receipts",
        "issues",
        "receipt",
        "health",
        "cookbook",
        "http",
    ],
)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert "usage: pos-serve " + command in capsys.readouterr().out


def test_bad_input_exits_2_with_the_reason_before_any_connection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["windows", "--store", "1", "--start", "2026-03-03", "--end", "2026-03-02"])
    assert code == cli.EXIT_BAD_INPUT
    assert "empty or inverted range" in capsys.readouterr().err
    assert cli.main(["top", "--day", "2026-13-01"]) == cli.EXIT_BAD_INPUT
    assert "is not a date" in capsys.readouterr().err


def test_cookbook_command_prints_queries_for_the_configured_keyspace(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POS_CASSANDRA_KEYSPACE", "shop")
    assert cli.main(["cookbook", "--store", "7", "--day", "2026-01-05"]) == 0
    out = capsys.readouterr().out
    assert "FROM shop.agg_15m_speed WHERE operation_id = 7 AND day = '2026-01-05';" in out
    assert "```" not in out


def test_the_local_day_recipes_read_its_utc_window_range_over_two_utc_days() -> None:
    values = {**cookbook.EXAMPLE, "store": 102, "zone": "Asia/Kathmandu", "day": "2026-03-02"}
    registry, one, speed, receipts, pointer = cookbook.statements(
        values, cookbook.LOCAL_DAY_RECIPES
    )
    assert registry == "SELECT operation_id, name, time_zone, opening_hours\n  FROM pos.stores;"
    assert one.endswith("FROM pos.stores WHERE operation_id = 102;")
    assert speed.endswith(
        "FROM pos.agg_15m_speed WHERE operation_id = 102 AND day IN ('2026-03-01', "
        "'2026-03-02')\n   AND window_start >= '2026-03-01T18:15:00Z' "
        "AND window_start < '2026-03-02T18:15:00Z';"
    )
    assert receipts.endswith(
        "FROM pos.receipts_by_store_day WHERE operation_id = 102 AND day IN ('2026-03-01', "
        "'2026-03-02')\n   AND happened_at >= '2026-03-01T18:15:00Z' "
        "AND happened_at < '2026-03-02T18:15:00Z';"
    )
    assert pointer.endswith("AND day IN ('2026-03-01', '2026-03-02');")
    # Values without a zone (a caller of the views' recipes only): the UTC day.
    no_zone = {k: v for k, v in values.items() if k != "zone"}
    assert (
        "AND day IN ('2026-03-02')\n" in cookbook.statements(no_zone, cookbook.LOCAL_DAY_RECIPES)[2]
    )
    # New York's fall-back day: 25 hours, still two UTC days.
    ny = {**values, "zone": "America/New_York", "day": "2026-11-01"}
    assert (
        "window_start >= '2026-11-01T04:00:00Z' AND window_start < '2026-11-02T05:00:00Z'"
        in (cookbook.statements(ny, cookbook.LOCAL_DAY_RECIPES)[2])
    )


def test_cookbook_refuses_an_unknown_zone_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cookbook", "--zone", "Mars/Olympus"]) == cli.EXIT_BAD_INPUT
    assert "time zone 'Mars/Olympus' is unknown" in capsys.readouterr().err
    assert cli.main(["cookbook", "--day", "2026-02-30"]) == cli.EXIT_BAD_INPUT
    assert "is not a date" in capsys.readouterr().err


def test_new_commands_refuse_bad_days_before_any_connection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["hour-of-week", "--store", "1", "--first", "2026-03-09", "--last", "x"])
    assert code == cli.EXIT_BAD_INPUT and "last 'x' is not a date" in capsys.readouterr().err
    assert cli.main(["week-before", "--store", "1", "--day", "2026-02-30"]) == cli.EXIT_BAD_INPUT


def test_hour_of_week_and_week_before_as_text() -> None:
    from datetime import date

    from tests.unit.serving.test_dashboard import NY_DAY, FakeLocalServing

    fake = FakeLocalServing()
    text = cli._hour_of_week_text(fake.hour_of_week(103, date(2026, 2, 9), NY_DAY))  # type: ignore[arg-type]
    lines = text.splitlines()
    assert lines[0].startswith("store 103 (SoHo), America/New_York, local days 2026-02-09..")
    assert lines[2].split()[:3] == ["00", "01", "02"] and len(lines[2].split()) == 24
    assert lines[9].split() == ["sun"] + ["0"] * 7 + ["6", "0", "0", "0", "9"] + ["0"] * 12
    assert (
        lines[18].split()[8] == "60" and lines[-1] == "total: 15 receipts, 15 items, revenue 130.00"
    )
    cmp = cli._week_before_text(fake.compare_week_before(103, NY_DAY))  # type: ignore[arg-type]
    assert cmp.splitlines()[0] == "store 103 (SoHo), America/New_York, Sunday vs a week before"
    assert cmp.splitlines()[2].split() == ["receipts", "9", "6", "+50.0%"]
