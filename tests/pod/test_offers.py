"""Tiles offered by same-host GPU owners before the fetch (pod/rpc/offers.py): each offer is taken at
most once, by exactly its key, and forgotten with its job or generation."""

from __future__ import annotations

from pod.rpc.offers import Offer, Offers
from schemas.capnp_io import TileHeader


def offer(n: int) -> Offer:
    return Offer(bytes([n]) * 64, TileHeader(shape=(4, n), dtype="f32", nbytes=16 * n, checksum=0), 0)


def test_an_offer_is_taken_once_and_only_by_its_own_key():
    offers = Offers()
    offers.put("j", 1, 0, 5, offer(1))
    assert offers.take("j", 2, 0, 5) is None  # another generation
    assert offers.take("j", 1, 3, 5) is None  # another owner
    assert offers.take("k", 1, 0, 5) is None  # another job
    assert offers.take("j", 1, 0, 5) == offer(1)
    assert offers.take("j", 1, 0, 5) is None  # taken: the next fetch of it asks the owner


def test_a_repeated_offer_replaces_the_first():
    offers = Offers()
    offers.put("j", 1, 0, 5, offer(1))
    offers.put("j", 1, 0, 5, offer(2))
    assert len(offers) == 1 and offers.take("j", 1, 0, 5) == offer(2)


def test_offers_go_with_their_job_or_their_dropped_generations():
    offers = Offers()
    for generation in (1, 2, 3):
        offers.put("j", generation, 0, 5, offer(generation))
    offers.put("k", 1, 0, 5, offer(9))
    offers.drop("j", 2)
    assert offers.take("j", 1, 0, 5) is None and offers.take("j", 2, 0, 5) is None
    assert offers.take("j", 3, 0, 5) == offer(3)
    offers.drop("k")
    assert len(offers) == 0


def test_offers_past_the_limit_drop_the_oldest():
    offers = Offers(limit=3)
    for buffer in range(5):
        offers.put("gone", 1, 0, buffer, offer(buffer + 1))
    assert len(offers) == 3
    assert [offers.take("gone", 1, 0, b) is not None for b in range(5)] == [False, False, True, True, True]
