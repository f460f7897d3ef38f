"""`pos-producer` argument handling and replay parsing (no Kafka needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pos_lambda.producer import ledger
from pos_lambda.producer.cli import _replay_messages, build_parser, main
from pos_lambda.producer.kafka_sink import ProducerError, check_topic


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--count", "0"], "must be a positive whole number"),
        (["simulate", "--count", "5", "--rate", "-3"], "must be >= 0"),
        (["simulate", "--count", "5", "--resend-rate", "1.5"], "between 0 and 1"),
        (["simulate", "--count", "5", "--late-rate", "abc"], "not a number: 'abc'"),
        (["simulate", "--count", "5", "--late-max-delay", "inf"], "must be a finite number"),
        (["simulate", "--count", "many"], "not a whole number"),
        (["simulate", "--count", "5", "--start", "2026-03-02T08:00:00"], "add a UTC offset"),
        (["simulate", "--count", "5", "--start", "yesterday"], "not an ISO-8601 timestamp"),
        (["simulate"], "--count"),
    ],
)
def test_bad_flags_say_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_late_bound_below_the_late_threshold_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--count", "5", "--dry-run", "--late-max-delay", "600"])
    assert exit_.value.code == 2
    assert "must exceed the contract's LATE_THRESHOLD (900 s)" in capsys.readouterr().err


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["simulate", "--help"], ["replay", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 0
    assert "--late-max-delay" in capsys.readouterr().out


def test_output_file_then_replay_parsing(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    assert main(["simulate", "--count", "3", "--seed", "1", "--output", str(out),
                 "--start", "2026-03-02T08:00:00+00:00", "--malformed-rate", "1"]) == 0  # fmt: skip
    lines = out.read_bytes().splitlines()
    assert len(lines) == 6  # 3 receipts, each followed by a malformed sibling
    out.write_bytes(out.read_bytes() + b"\n\n")  # blank lines are skipped
    replayed = list(_replay_messages(out))
    assert [m.value for m in replayed] == lines
    keyed = [m for m in replayed if m.key is not None]
    assert len(keyed) == 3 and all(m.key.count(b":") == 1 for m in keyed)


def test_replay_of_a_missing_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay", "/nonexistent/file.jsonl"])
    assert exit_.value.code == 2
    assert "no such file: /nonexistent/file.jsonl" in capsys.readouterr().err


def test_dry_run_writes_the_ledger_and_contacts_no_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    led = tmp_path / "ledger"
    # Port 1 has no broker: a dry run must not try it.
    assert main(["simulate", "--count", "50", "--seed", "3", "--dry-run", "--ledger", str(led),
                 "--bootstrap-servers", "127.0.0.1:1", "--resend-rate", "0.2",
                 "--start", "2026-03-02T08:00:00+00:00"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    summary = ledger.load_summary(led)
    assert printed == summary
    assert "topic" not in summary and "delivery" not in summary
    assert summary["unique_receipts"] == 50 == len(ledger.load_receipts(led))
    assert summary["messages"] == 50 + summary["faults"]["resend"]
    assert len(ledger.load_faults(led)) == summary["faults"]["resend"] > 0
    assert (summary["seed"], summary["start"]) == (3, "2026-03-02T08:00:00+00:00")


def test_an_unreachable_kafka_is_named_with_the_fix() -> None:
    with pytest.raises(ProducerError, match=r"cannot reach Kafka at 127\.0\.0\.1:1: is it running"):
        check_topic("127.0.0.1:1", "pos.transactions", timeout_s=1)
