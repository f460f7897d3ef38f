"""The winner rule record by record (pure): first copy wins; later copies are resends
when their content was seen for the key before, conflicts when it is new."""

from __future__ import annotations

from pos_lambda.views.copies import Copies

A, B = (101, 1001, 1), (101, 1001, 2)


def test_verdicts_in_offset_order() -> None:
    copies = Copies()
    seen = [
        (copies.observe(key, digest, offset)[0], key, digest)
        for offset, (key, digest) in enumerate(
            [(A, "h1"), (A, "h1"), (B, "h1"), (A, "h2"), (A, "h2"), (A, "h3"), (A, "h1")]
        )
    ]
    assert [v for v, _, _ in seen] == [
        "winner", "resend", "winner", "conflict", "resend", "conflict", "resend",
    ]  # fmt: skip
    verdict, winner = copies.observe(A, "h4", 99)
    assert (verdict, winner.first_hash, winner.first_offset) == ("conflict", "h1", 0)
    assert winner.hashes == {"h1", "h2", "h3", "h4"}
