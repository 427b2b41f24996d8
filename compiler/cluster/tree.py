"""Reduction trees: how the partials of one output, one per share of its cluster loop's chunks,
are merged into the root's (share 0's).

A tree is a list of rounds; each round is a list of merges (into, source), meaning "combine
source's partial into into's", which run at once on different nodes. Every share but 0 is a source
exactly once, and a share is never merged into after it has been a source.

    flat     0 <- 1, 0 <- 2, ..., 0 <- S-1, one per round: the root combines every partial.
    binary   round k merges i <- i + 2^k for i a multiple of 2^(k+1): ceil(log2 S) rounds.
    hosts    shares grouped by host (`hosts` lists each host's share count, in order); each host
             merges its shares into its first one (flat, rounds shared by all hosts), then the
             hosts' first shares into the root, flat: a central root, and one transfer per host
             across hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError
from compiler.cluster.tree_shapes import SHAPES


@dataclass(frozen=True)
class SplitRequest:
    """Split every unit's cluster loop over `shares` nodes and merge by a tree of `shape`."""

    shares: int
    shape: str = "flat"
    hosts: tuple[int, ...] = ()  # shares per host, for the "hosts" shape

    def __post_init__(self):
        if isinstance(self.shares, bool) or not isinstance(self.shares, int) or self.shares < 1:
            raise UserError(f"the split count must be a positive integer, not {self.shares!r}")
        if self.shape not in SHAPES:
            raise UserError(f"unknown reduction tree '{self.shape}' (known: {', '.join(SHAPES)})")
        if self.shape == "hosts" and (sum(self.hosts) != self.shares or any(h < 1 for h in self.hosts)):
            raise UserError(
                f"a tree by hosts needs each host's share count, summing to {self.shares} "
                f"(got {list(self.hosts)})"
            )


NO_SPLIT = SplitRequest(1)  # no split: the cluster loop of each unit on one node


Rounds = tuple[tuple[tuple[int, int], ...], ...]


def _flat(members: list[int]) -> list[list[tuple[int, int]]]:
    return [[(members[0], s)] for s in members[1:]]


def _binary(shares: int) -> list[list[tuple[int, int]]]:
    rounds, gap = [], 1
    while gap < shares:
        rounds.append([(i, i + gap) for i in range(0, shares, 2 * gap) if i + gap < shares])
        gap *= 2
    return rounds


def _hosts(hosts: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    starts = [sum(hosts[:i]) for i in range(len(hosts))]
    inner = [_flat(list(range(s, s + n))) for s, n in zip(starts, hosts, strict=True)]
    rounds = [
        [m for per_host in inner if r < len(per_host) for m in per_host[r]]
        for r in range(max((len(x) for x in inner), default=0))
    ]
    return rounds + _flat(starts)


def tree_rounds(request: SplitRequest) -> Rounds:
    if request.shape == "flat":
        rounds = _flat(list(range(request.shares)))
    elif request.shape == "binary":
        rounds = _binary(request.shares)
    else:
        rounds = _hosts(request.hosts)
    return tuple(tuple(r) for r in rounds if r)


def share_chunks(chunks: int, shares: int) -> list[range]:
    """Contiguous ranges of chunk indices, one per share, sizes differing by at most one (the
    first shares take the extra chunks)."""
    base, extra = divmod(chunks, shares)
    out, start = [], 0
    for s in range(shares):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out
