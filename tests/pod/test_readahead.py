"""Reading a plan's inputs ahead of its loads (pod/readahead.py): which byte spans are advised
to the kernel, in plan order, within the window."""

from __future__ import annotations

from pathlib import Path

from pod.readahead import ReadAhead, Span


def window(spans: dict[int, Span], budget: int, most: int = 64) -> tuple[ReadAhead, list[int]]:
    asked: list[int] = []

    def span_of(load: int) -> Span:
        asked.append(load)
        return spans[load]

    return ReadAhead(sorted(spans), span_of, budget=budget, most=most), asked


def loads(advised: list[Span], spans: dict[int, Span]) -> list[int]:
    return [next(i for i, s in spans.items() if s is span) for span in advised]


def tile(i: int, nbytes: int = 100, useful: int = 100) -> Span:
    return Span(Path("/data/x.npy"), 128 + i * nbytes, nbytes, useful)


def test_each_load_advises_itself_and_the_next_ones_within_the_budget():
    spans = {i: tile(i) for i in range(10)}
    ahead, asked = window(spans, budget=250)
    assert loads(ahead.load_started(0), spans) == [0, 1, 2, 3]  # 300 bytes ahead: the first past 250
    assert asked == [0, 1, 2, 3]  # spans are worked out only as the window reaches them
    assert loads(ahead.load_started(1), spans) == [4]
    assert loads(ahead.load_started(5), spans) == [5]  # out of order: advised as it starts
    assert loads(ahead.load_started(2), spans) == [6]  # 5 is skipped: it started already
    assert loads(ahead.load_started(3), spans) == [7]
    assert loads(ahead.load_started(4), spans) == [8]
    assert loads(ahead.load_started(6), spans) == [9]
    for i in (7, 8):
        assert ahead.load_started(i) == []  # nothing left to advise
    assert ahead.load_started(9) == []  # advised already
    assert sorted(asked) == list(range(10))


def test_a_span_mostly_of_bytes_nobody_asked_for_is_not_advised():
    spans = {0: tile(0, nbytes=1000, useful=100), 1: tile(1), 2: tile(2, nbytes=0, useful=0)}
    ahead, _ = window(spans, budget=1 << 20)
    assert loads(ahead.load_started(0), spans) == [1]


def test_at_most_so_many_loads_ahead():
    spans = {i: tile(i) for i in range(10)}
    ahead, asked = window(spans, budget=1 << 30, most=3)
    assert loads(ahead.load_started(0), spans) == [0, 1, 2, 3]
    assert asked == [0, 1, 2, 3]
