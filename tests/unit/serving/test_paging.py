"""The page tokens' key: configured, else generated once into the state dir (0600)."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

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
