"""The auditor finds a dead letter by the SHA-256 of its whole value, prefix or not."""

from __future__ import annotations

import hashlib

from pos_lambda.audit.readers import dead_letter_sha256


def test_the_stored_hash_of_the_whole_value_is_used_when_the_row_holds_a_prefix() -> None:
    whole = b"j" * 300_000
    stored = hashlib.sha256(whole).hexdigest()
    assert dead_letter_sha256(stored, whole[:4096]) == stored


def test_a_row_from_before_prefixes_is_hashed_from_its_whole_raw_value() -> None:
    assert dead_letter_sha256(None, b"{") == hashlib.sha256(b"{").hexdigest()
    assert dead_letter_sha256(None, None) == hashlib.sha256(b"").hexdigest()
