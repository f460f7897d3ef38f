"""The lease on an alerts instance id: what a starting instance decides (pure)."""

from __future__ import annotations

from pos_lambda.transactional.lease import Holder, judge, owner_token, renewal

MINE = "42:aaaa"
OTHER = Holder("7:bbbb", "host-b", 7, beats=3)


def test_an_inherited_owner_token_is_kept_only_by_the_pid_that_made_it() -> None:
    assert owner_token("42:aaaa", 42, "42:new") == "42:aaaa"  # exec: same pid
    assert owner_token("41:aaaa", 42, "42:new") == "42:new"  # a child of the holder
    assert owner_token(None, 42, "42:new") == "42:new"


def test_its_own_row_is_taken_back_at_once() -> None:
    assert judge(MINE, None, Holder(MINE, "h", 42, 9), 0.0, 15) == "take_over"


def test_another_holders_row_is_watched_until_it_renews_or_expires() -> None:
    assert judge(MINE, None, OTHER, 0.0, 15) == "wait"
    assert judge(MINE, OTHER, OTHER, 19.9, 15) == "wait"  # not renewed: dead, or soon
    renewed = Holder(OTHER.owner, OTHER.host, OTHER.pid, beats=4)
    assert judge(MINE, OTHER, renewed, 5.0, 15) == "refuse"
    third = Holder("8:cccc", "host-c", 8, beats=1)  # someone else took it meanwhile
    assert judge(MINE, OTHER, third, 1.0, 15) == "refuse"


def test_a_row_that_neither_renews_nor_expires_within_a_ttl_and_a_beat_is_refused() -> None:
    assert judge(MINE, OTHER, OTHER, 20.1, 15) == "refuse"


def test_a_renewal_tells_held_vanished_and_lost_apart() -> None:
    assert renewal(True, None) == "held"
    assert renewal(False, None) == "vanished"
    assert renewal(False, "7:bbbb") == "lost"


def test_a_short_ttl_still_waits_out_cassandras_second_granularity() -> None:
    assert judge(MINE, OTHER, OTHER, 5.9, 3) == "wait"
    assert judge(MINE, OTHER, OTHER, 6.1, 3) == "refuse"
