"""`pos-producer` argument handling and replay parsing (no Kafka needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from producer.cli import _replay_messages, build_parser, main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--count", "0"], "must be a positive whole number"),
        (["simulate", "--count", "5", "--rate", "-3"], "must be >= 0"),
        (["simulate", "--count", "5", "--resend-rate", "1.5"], "between 0 and 1"),
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
    assert main(["replay", "/nonexistent/file.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err
