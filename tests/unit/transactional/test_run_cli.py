"""`pos-alerts` and `pos-receipts`, the commands of the transactional shell: help, and
bad configuration refused (exit 2, named by its variable) before any connection."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pos_lambda.alerts import cli as alerts_cli
from pos_lambda.dedup import cli as receipts_cli

Main = Callable[[list[str] | None], int]


@pytest.mark.parametrize(
    ("main", "commands", "flag"),
    [
        (alerts_cli.main, ["run", "sink"], "--until-caught-up"),
        (receipts_cli.main, ["run"], "--output-topic"),
    ],
)
def test_help_exits_0(
    capsys: pytest.CaptureFixture[str], main: Main, commands: list[str], flag: str
) -> None:
    for argv in (["--help"], *([c, "--help"] for c in commands)):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
    assert flag in capsys.readouterr().out


@pytest.mark.parametrize(
    ("main", "env", "argv", "says"),
    [
        (alerts_cli.main, {"POS_ALERTS_STORE_OPENS_AT": "22:00"}, ["run"],
         "open before they close"),
        (alerts_cli.main, {"POS_ALERTS_MODE": "twice"}, ["run"], "alerts_mode"),
        (alerts_cli.main, {}, ["run", "--transaction-max-ms", "0"], "alerts_transaction_max_ms"),
        (alerts_cli.main, {"POS_ALERTS_CRASH_POINT": "sometimes"}, ["run"], "alerts_crash_point"),
        (receipts_cli.main, {"POS_RECEIPTS_MODE": "twice"}, ["run"], "receipts_mode"),
        (receipts_cli.main, {}, ["run", "--transaction-max-ms", "0"],
         "receipts_transaction_max_ms"),
        (receipts_cli.main, {"POS_RECEIPTS_CRASH_POINT": "sometimes"}, ["run"],
         "receipts_crash_point"),
        (receipts_cli.main, {}, ["run", "--instance-id", "a b"], "receipts_instance_id"),
    ],
)  # fmt: skip
def test_bad_configuration_exits_2_before_any_connection(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    main: Main,
    env: dict[str, str],
    argv: list[str],
    says: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Nothing listens on port 1: a connection attempt would end in another exit code.
    monkeypatch.setenv("POS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert main(argv) == 2
    assert says in capsys.readouterr().err
