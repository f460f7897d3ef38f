"""The hung-call watchdog (librdkafka#5456) and the in-place restart (no Kafka)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from pos_lambda.alerts.processor import Processor, rules_from
from pos_lambda.settings import load_settings
from pos_lambda.transactional import processor as processor_module
from pos_lambda.transactional.watchdog import (
    EXIT_RESTARTS_EXHAUSTED,
    IN_A_ROW_ENV,
    RESTARTS_ENV,
    Watchdog,
    committed,
    may_restart,
)


def test_a_call_that_returns_in_time_is_left_alone() -> None:
    expired = threading.Event()
    watchdog = Watchdog(lambda what: expired.set())
    try:
        with watchdog.guard("quick", 0.3):
            pass
        with watchdog.guard("quick again", 0.3):
            pass
        # Nothing to await: the deadline passes twice over and nothing may happen.
        assert not expired.wait(0.9)
    finally:
        watchdog.close()


def test_a_call_blocked_past_its_deadline_is_reported_while_it_still_blocks() -> None:
    seen: list[str] = []
    expired, release = threading.Event(), threading.Event()

    def on_expire(what: str) -> None:
        seen.append(what)
        expired.set()
        release.set()  # what a restart does to the stuck call: it never returns to it

    watchdog = Watchdog(on_expire)
    try:
        with watchdog.guard("send_offsets_to_transaction", 0.2):
            assert release.wait(30), "the watchdog never fired"
        assert expired.is_set() and seen == ["send_offsets_to_transaction"]
    finally:
        watchdog.close()


def test_the_processor_restarts_when_a_transactional_call_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`_call` guards each attempt with the call's timeout + margin; a call that never
    returns (like send_offsets_to_transaction in librdkafka#5456) leads to `restart`."""
    monkeypatch.setattr(processor_module, "HANG_MARGIN_S", 0.2)
    reasons: list[str] = []
    unblock = threading.Event()

    def restart(why: str) -> None:
        reasons.append(why)
        unblock.set()

    # Nothing listens on port 1: the clients are built, never reach a broker.
    s = load_settings(kafka_bootstrap_servers="127.0.0.1:1")
    proc = Processor(s, rules_from(s), restart=restart)
    try:
        result = proc._call(lambda: unblock.wait(30), "send_offsets_to_transaction", 0.1)
        assert result is True, "the watchdog never fired"
        assert len(reasons) == 1
        assert "send_offsets_to_transaction" in reasons[0] and "librdkafka#5456" in reasons[0]
    finally:
        proc.watchdog.close()
        proc.consumer.close()


def test_restart_in_place_execs_the_same_command_under_the_same_pid(tmp_path: Path) -> None:
    """A real exec: the second incarnation has the first one's pid and arguments, knows
    it was restarted, and inherits no descriptor beyond stdin/stdout/stderr."""
    script = tmp_path / "hangs_once.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import logging, os, sys, threading
            sys.path.insert(0, {str(Path.cwd())!r})
            from pos_lambda.transactional.watchdog import Watchdog, restart_in_place
            logging.basicConfig(level=logging.INFO, format="%(message)s")
            restarts = os.environ.get({RESTARTS_ENV!r}, "0")
            if restarts != "0":
                fd = int(os.environ["TEST_FD"])
                try:
                    os.fstat(fd)
                    inherited = "fd-inherited"
                except OSError:
                    inherited = "fd-closed"
                print("run", os.getpid(), restarts, *sys.argv[1:], inherited, flush=True)
                sys.exit(0)
            keep = open({str(tmp_path / "open.txt")!r}, "w")
            os.set_inheritable(keep.fileno(), True)  # as a C library's pipe may be
            os.environ["TEST_FD"] = str(keep.fileno())
            print("run", os.getpid(), restarts, *sys.argv[1:], flush=True)
            watchdog = Watchdog(restart_in_place)
            with watchdog.guard("a hung call", 0.2):
                threading.Event().wait()  # blocks forever, like the C call
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in (RESTARTS_ENV, IN_A_ROW_ENV)}
    out = subprocess.run(
        [sys.executable, str(script), "--flag"], capture_output=True, text=True, timeout=60,
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split()[:4], out.stdout.split()[4:]
    assert first[0] == "run" and first[2:] == ["0", "--flag"], out.stdout
    assert second == ["run", first[1], "1", "--flag", "fd-closed"], out.stdout
    assert "restarting in place (restart 1, 1 of 5 in a row): a hung call" in out.stderr


def test_restarts_are_allowed_up_to_the_limit_in_a_row() -> None:
    assert [may_restart(n, 5) for n in range(7)] == [True] * 5 + [False] * 2
    assert may_restart(0, 0) is False  # 0: never restart in place


def test_a_commit_starts_a_new_row_of_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IN_A_ROW_ENV, "3")
    monkeypatch.setenv(RESTARTS_ENV, "7")
    committed()
    assert (os.environ[IN_A_ROW_ENV], os.environ[RESTARTS_ENV]) == ("0", "7")


def test_the_processor_reports_its_restarts_and_restarts_with_the_settings_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RESTARTS_ENV, "7")
    monkeypatch.setenv(IN_A_ROW_ENV, "2")
    s = load_settings(kafka_bootstrap_servers="127.0.0.1:1", alerts_max_restarts_in_place=3)
    proc = Processor(s, rules_from(s))
    try:
        assert (proc.totals["restarts_in_place"], proc.totals["restarts_in_a_row"]) == (7, 2)
        assert proc.restart.keywords == {  # type: ignore[attr-defined]
            "limit": 3,
            "setting": "POS_ALERTS_MAX_RESTARTS_IN_PLACE",
        }
    finally:
        proc.watchdog.close()
        proc.consumer.close()


def test_a_hang_after_the_last_allowed_restart_exits_6_saying_why(tmp_path: Path) -> None:
    """A real process, as the processor's watchdog runs it: no exec, an exit."""
    script = tmp_path / "hangs_again.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import logging, sys, threading
            sys.path.insert(0, {str(Path.cwd())!r})
            from pos_lambda.transactional.watchdog import Watchdog, restart_in_place
            logging.basicConfig(level=logging.INFO, format="%(message)s")
            watchdog = Watchdog(lambda why: restart_in_place(why, limit=2))
            with watchdog.guard("a hung call", 0.2):
                threading.Event().wait()
            """
        )
    )
    env = {**os.environ, RESTARTS_ENV: "4", IN_A_ROW_ENV: "2"}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == EXIT_RESTARTS_EXHAUSTED == 6, out.stderr
    assert (
        "a hung call; not restarting: 2 in-place restarts in a row without a commit "
        "(POS_ALERTS_MAX_RESTARTS_IN_PLACE=2; 4 in all): exiting 6"
    ) in out.stderr
