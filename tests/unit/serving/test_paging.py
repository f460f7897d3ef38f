"""The page tokens' key: configured, else generated once into the state dir (0600)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from pos_lambda.serving import paging
from pos_lambda.settings import Settings


def test_a_configured_key_is_used_and_nothing_is_written(tmp_path: Path) -> None:
    s = Settings(state_dir=tmp_path, serve_page_key="a shared secret")
    assert paging.page_key(s) == hashlib.sha256(b"a shared secret").digest()
    assert list(tmp_path.iterdir()) == []


def test_without_one_a_key_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    s = Settings(state_dir=tmp_path)
    first = paging.page_key(s)
    key_file = tmp_path / "serve" / "page.key"
    assert key_file.read_bytes() == first and len(first) == 32
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert paging.page_key(s) == first  # another process (the CLI) gets the same key


def test_an_unwritable_state_dir_gives_a_key_per_process(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = Settings(state_dir=blocker)
    assert len(paging.page_key(s)) == 32
    assert paging.page_key(s) != paging.page_key(s)  # random each time: not stored


def test_sign_and_verify() -> None:
    key = bytes(32)
    token = paging.sign(b"payload", key)
    assert paging.verify(token, key) == b"payload"
    assert paging.verify(token, bytes([1]) * 32) is None
    assert paging.verify(token + "A", key) is None
    assert paging.verify(token.replace(".", ""), key) is None


def test_a_reader_between_anothers_create_and_write_waits_for_the_key(tmp_path: Path) -> None:
    # The race staged: another process has created page.key (empty) and not written it
    # yet. The reader must not make a key of its own: it waits, then reads the key the
    # other one writes (here, at the reader's first pause).
    key_file = tmp_path / "serve" / "page.key"
    key_file.parent.mkdir()
    key_file.write_bytes(b"")
    theirs = bytes(range(32))
    pauses: list[float] = []

    def other_process_writes(seconds: float) -> None:
        pauses.append(seconds)
        key_file.write_bytes(theirs)

    assert paging._stored_key(key_file, sleep=other_process_writes) == theirs
    assert pauses == [0.05]
    assert paging.page_key(Settings(state_dir=tmp_path)) == theirs  # and every later one


def test_a_key_file_that_stays_short_is_refused_after_the_wait(tmp_path: Path) -> None:
    key_file = tmp_path / "page.key"
    key_file.write_bytes(b"\0" * 5)
    pauses: list[float] = []
    with pytest.raises(OSError, match=r"page\.key holds 5 bytes, not 32: delete it and restart"):
        paging._stored_key(key_file, wait=0.2, sleep=pauses.append)
    assert len(pauses) == 4  # 0.2 s in steps of 0.05 s, then refused


def test_the_key_file_appears_whole_and_the_first_link_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two processes start together: the other one links its key in just before ours.
    key_file = tmp_path / "serve" / "page.key"
    theirs = b"\x07" * 32
    seen: list[int] = []
    link = os.link

    def racing_link(src: str, dst: Path) -> None:
        seen.append(os.path.getsize(src))  # what a reader could see once it is linked
        key_file.write_bytes(theirs)
        link(src, dst)

    monkeypatch.setattr(paging.os, "link", racing_link)
    assert paging._stored_key(key_file) == theirs
    assert seen == [32]  # never an empty or partial file at the key's path
    assert [p.name for p in key_file.parent.iterdir()] == ["page.key"]  # no temp file left
