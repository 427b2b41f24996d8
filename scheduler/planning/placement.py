"""Placement: which node runs which part of each unit, and in which round.

Pure. The planner (scheduler/planning/planner.py) unrolls what this decides. A unit is placed as one or
more pieces, one per node it uses:

    plain unit    one piece. Units are dealt round robin: the k-th unit goes to node k % n in
                  round k // n, so every node runs one unit per round.
    split unit    its cluster loop is cut into S shares (compiler/cluster/split.py; `Launch.share`
                  says which share runs each launch). With S <= n the shares go to S distinct
                  nodes, those with the fewest rounds so far (ties in turn from where the last unit
                  stopped), all in one round: the first round in which all of them are free; the root, share
                  0, moves to the next of them with every unit. With
                  S > n (a re-plan after nodes died) share s goes to node (start + s) % n, so a
                  node runs several shares of the unit in one piece.
    tree by hosts the split's share groups (tree.py: `hosts`, each group merged into its first
                  share, then the groups' first shares into the root) go to hosts in turn, group g
                  onto the nodes of the g-th host (hosts in order of their first node), so that only
                  the groups' partials cross hosts. Where the nodes left do not allow it (fewer hosts
                  than groups, or fewer nodes on a host than its group's shares) the shares are
                  placed as any split's: still right, only with more transfers across hosts.

A piece holds its shares' launches in the unit's order: each share's init and steps, the tree's
merges into one of its shares, and the finish where share 0 runs. All pieces of a unit share its
round, so a merge's source partial is produced in the same round as the merge that fetches it;
the planner's "every wait points to an earlier round" argument rests on that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from schemas.units import Launch, Unit, UnitColumns


class Piece(NamedTuple):  # a tuple: built about three times faster than a frozen dataclass
    unit: Unit
    node: int
    round: int
    launches: tuple[Launch, ...]
    shares: tuple[int, ...]  # the unit's shares this piece runs (a plain unit: (0,))


def shares_of(unit: Unit) -> int:
    return 1 + max((launch.share for launch in unit.launches), default=0)


def place(units: Sequence[Unit], nodes: Sequence[int], hosts: Mapping[int, str] | None = None,
          groups: tuple[int, ...] = ()) -> list[Piece]:
    """The pieces of `units` (in the order given) over `nodes`, in placement order, for a program
    whose cluster loop is split (a program without one: `place_columns` deals its units round
    robin); `hosts` maps a node to its host, `groups` are the shares per host of a tree by hosts
    (empty: another tree)."""
    n = len(nodes)
    free_from = dict.fromkeys(nodes, 0)  # node -> first round it has nothing in
    turn = 0  # where the next unit's choice of nodes starts, so that roots rotate
    by_host = _nodes_by_host(nodes, hosts or {})
    pieces: list[Piece] = []
    for placed, unit in enumerate(units):
        shares = shares_of(unit)
        of_share = _by_host(groups, by_host, free_from) if groups and shares == sum(groups) else None
        if of_share is None:
            of_share = _spread(shares, nodes, free_from, turn, placed)
        turn = (turn + shares) % n
        used = list(dict.fromkeys(of_share.values()))
        at = max(free_from[node] for node in used)
        for node in used:
            free_from[node] = at + 1
            mine = tuple(s for s, on in of_share.items() if on == node)
            launches = tuple(la for la in unit.launches if la.share in mine)
            pieces.append(Piece(unit, node, at, launches, mine))
    return pieces


def _spread(shares: int, nodes: Sequence[int], free_from: dict[int, int], turn: int, placed: int
            ) -> dict[int, int]:
    """share -> node: distinct nodes, the least busy first (ties in turn from `turn`), the root
    (share 0, which merges last and stores) moving on with every unit; or round robin from `turn`
    when there are more shares than nodes."""
    n = len(nodes)
    if shares > n:
        return {s: nodes[(turn + s) % n] for s in range(shares)}
    rank = sorted(range(n), key=lambda i: (free_from[nodes[i]], (i - turn) % n))
    chosen = [nodes[i] for i in rank[:shares]]
    return {s: chosen[(s + placed) % shares] for s in range(shares)}


def _nodes_by_host(nodes: Sequence[int], hosts: Mapping[int, str]) -> list[list[int]]:
    out: dict[str, list[int]] = {}
    for node in nodes:
        out.setdefault(hosts.get(node, ""), []).append(node)
    return list(out.values())


def _by_host(groups: tuple[int, ...], by_host: list[list[int]], free_from: dict[int, int]
             ) -> dict[int, int] | None:
    """share -> node for a tree by hosts, group g on the g-th host's least busy nodes; None where
    the hosts cannot hold the groups."""
    if len(by_host) < len(groups) or any(len(h) < g for h, g in zip(by_host, groups, strict=False)):
        return None
    of_share, share = {}, 0
    for count, members in zip(groups, by_host, strict=False):
        for node in sorted(members, key=lambda m: free_from[m])[:count]:
            of_share[share] = node
            share += 1
    return of_share


def root_node(pieces: Sequence[Piece]) -> dict[int, int]:
    """unit index -> the node running its share 0, which stores the unit's outputs."""
    return {p.unit.index: p.node for p in pieces if 0 in p.shares}


@dataclass
class Placed:
    """The pieces as the planner's columns (scheduler/planning/plan_arrays.py): the units placed, per
    launch of a piece (in placement order, a piece's launches in its unit's order) its position
    among the units' launches and its piece; per piece the rank of its node in the list given,
    its round and its unit's index; and the roots."""

    units: UnitColumns
    l_launch: np.ndarray
    l_piece: np.ndarray
    rank: np.ndarray
    round: np.ndarray
    unit: np.ndarray
    roots: dict[int, int]


def place_columns(units: UnitColumns, nodes: Sequence[int], hosts: Mapping[int, str] | None = None,
                  groups: tuple[int, ...] = (), split: bool = True) -> Placed:
    """`place`, as columns. Units that are not split are dealt round robin with arrays (no object
    per piece): the planner's hot path at a million units."""
    per_unit = np.diff(units.launch_start)
    if not split:
        dealt = np.arange(len(units), dtype=np.int64)
        rank, rounds = dealt % len(nodes), dealt // len(nodes)
        roots = dict(zip(units.unit_index.tolist(), np.asarray(nodes)[rank].tolist(), strict=True))
        return Placed(units, np.arange(len(units.leaf), dtype=np.int64), np.repeat(dealt, per_unit), rank,
                      rounds, units.unit_index, roots)
    pieces = place(units, nodes, hosts, groups)
    rank_of = {node: rank for rank, node in enumerate(nodes)}
    position = units.positions_of([p.unit.index for p in pieces]).tolist()  # pieces are of `units`
    widest = 1 + int(units.share.max(initial=0))
    piece_of = np.full(len(units) * widest, -1, np.int64)  # (unit position, share) -> its piece
    for at, (p, unit_at) in enumerate(zip(pieces, position, strict=True)):
        piece_of[[unit_at * widest + s for s in p.shares]] = at
    l_piece = piece_of[np.repeat(np.arange(len(units), dtype=np.int64), per_unit) * widest + units.share]
    l_launch = np.argsort(l_piece, kind="stable")  # stable: a piece's launches in its unit's order
    return Placed(units, l_launch, l_piece[l_launch],
                  np.fromiter((rank_of[p.node] for p in pieces), np.int64, len(pieces)),
                  np.fromiter((p.round for p in pieces), np.int64, len(pieces)),
                  np.fromiter((p.unit.index for p in pieces), np.int64, len(pieces)), root_node(pieces))
