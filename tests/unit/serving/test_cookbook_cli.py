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
    ["windows", "days", "top", "receipts", "issues", "receipt", "health", "cookbook", "http"],
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
