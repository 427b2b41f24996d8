"""The planner's later passes as array operations: loaders, releases and peaks (every
instruction's columns come after them: scheduler/planning/plan_instructions.py). The rules are
scheduler/planning/planner.py's module doc; the names (p, o, r, c, l, rank) are
scheduler/planning/plan_arrays.py's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.planning.plan_arrays import Buffers, Flat, Order
from schemas.arrays import I64, excl


def index_type(*bounds: int) -> type:
    """int32 when every bound lies in its range, else int64: chosen from the actual extremes so
    that nothing wraps. The rows (ten million at a million units) and deps (twenty million)
    are the planner's biggest arrays, and the memory a plan first touches is most of its time."""
    return np.int32 if -2**31 <= min(bounds) and max(bounds) < 2**31 else I64


@dataclass
class Tensors:
    """Per tensor of the program (flatten's index): bytes per element, partial or not, its index
    among the stored tensors (-1: a partial) and its dtype's index into the names."""

    itemsize: np.ndarray
    scratch: np.ndarray
    stored: np.ndarray
    dtype_name: np.ndarray


@dataclass
class Owners:
    """Per copy: loads it (owner), and the copy's key group; per group: the owning copy, the last
    round a peer fetches it in (-1: none) and its fetchers in creation order (CSR)."""

    c_owner: np.ndarray
    c_group: np.ndarray
    g_owner: np.ndarray
    g_last_fetch: np.ndarray
    fetchers: np.ndarray  # fetcher copies, grouped by key group, in order of creation
    fetch_start: np.ndarray


def choose_owners(flat: Flat, bufs: Buffers, tensors: Tensors, n_nodes: int) -> Owners:
    """One loader per input region: of the nodes needing it in the round of its first use in
    placement order, the one that has loaded the fewest bytes so far (regions taken in order of
    first use). Only regions with several such nodes need a choice, one at a time in Python;
    what the others add to each node's bytes is summed with arrays."""
    copies = len(bufs.c_key)
    c_pos = flat.p_round[flat.r_piece[bufs.c_first_row]]
    by_key = np.lexsort((bufs.c_first_row, bufs.c_key))
    starts = np.ones(copies, bool)
    starts[1:] = bufs.c_key[by_key][1:] != bufs.c_key[by_key][:-1]
    c_group = np.empty(copies, I64)
    c_group[by_key] = np.cumsum(starts) - 1
    g_first = by_key[starts]
    groups = len(g_first)
    candidate = c_pos == c_pos[g_first][c_group]
    n_cand = np.bincount(c_group[candidate], minlength=groups)
    keys = bufs.c_key[g_first]
    g_bytes = flat.k_elements[keys] * tensors.itemsize[flat.k_tensor[keys]]
    g_rank = np.empty(groups, I64)
    g_rank[np.argsort(bufs.c_first_row[g_first], kind="stable")] = np.arange(groups)
    g_owner = g_first.copy()
    if np.any(n_cand > 1):
        _choose_among_candidates(g_owner, by_key[candidate[by_key]], c_group, n_cand, g_rank, g_bytes,
                                 bufs.c_rank, n_nodes)
    c_owner = np.zeros(copies, bool)
    c_owner[g_owner] = True
    fetchers = by_key[~c_owner[by_key]]
    g_last_fetch = np.full(groups, -1, I64)
    np.maximum.at(g_last_fetch, c_group[fetchers], c_pos[fetchers])
    fetch_start = excl(np.bincount(c_group[fetchers], minlength=groups))
    narrow = index_type(copies, int(flat.p_round.max(initial=0)))  # copies, groups, counts, rounds
    return Owners(c_owner, *(column.astype(narrow)  # held until the plan is made
                             for column in (c_group, g_owner, g_last_fetch, fetchers, fetch_start)))


def _choose_among_candidates(g_owner, candidates, c_group, n_cand, g_rank, g_bytes, c_rank, n_nodes) -> None:
    """`candidates`: the copies created in a group's first round, by group then creation."""
    single = n_cand == 1
    groups = len(n_cand)
    key = c_rank[g_owner[single]] * groups + g_rank[single]
    by = np.argsort(key)
    sorted_key, loaded = key[by], excl(g_bytes[single][by])
    chosen = candidates[n_cand[c_group[candidates]] > 1]
    ranks, at = c_rank[chosen], g_rank[c_group[chosen]]
    before = (loaded[np.searchsorted(sorted_key, ranks * groups + at)]
              - loaded[np.searchsorted(sorted_key, ranks * groups)])  # single owners' bytes
    bounds = excl(n_cand[c_group[chosen]][np.r_[True, c_group[chosen][1:] != c_group[chosen][:-1]]])
    group_of = c_group[chosen][bounds[:-1]]
    extra = [0] * n_nodes  # bytes the choices so far added to each node
    ranks_l, before_l, chosen_l = ranks.tolist(), before.tolist(), chosen.tolist()
    for i in np.argsort(g_rank[group_of], kind="stable").tolist():
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        best = min(range(lo, hi), key=lambda j: before_l[j] + extra[ranks_l[j]])
        g_owner[group_of[i]] = chosen_l[best]
        extra[ranks_l[best]] += int(g_bytes[group_of[i]])


@dataclass
class Releases:
    """Per copy: the piece whose allocations wait for its free (-1: none), and the round until
    which it is held."""

    piece: np.ndarray
    stop: np.ndarray


def releases(flat: Flat, order: Order, bufs: Buffers, owners: Owners) -> Releases:
    """A copy is released two rounds after its last local use, and an owner's not before the
    round after its last fetch; its free gates the node's first piece at or after that round."""
    last_pos = flat.p_round[flat.r_piece[bufs.c_last_row]]
    release = last_pos + 2
    has = owners.c_owner & (owners.fetch_start[owners.c_group + 1] > owners.fetch_start[owners.c_group])
    release[has] = np.maximum(release[has], owners.g_last_fetch[owners.c_group[has]] + 1)
    span = int(flat.p_round.max(initial=0)) + 4
    sorted_key = flat.p_rank[order.order] * span + flat.p_round[order.order]
    at = np.searchsorted(sorted_key, bufs.c_rank * span + release)
    released = at < order.start[bufs.c_rank + 1]
    piece = np.full(len(at), -1, I64)
    piece[released] = order.order[at[released]]
    stop = order.rounds[bufs.c_rank].copy()
    stop[released] = flat.p_round[piece[released]]
    narrow = index_type(len(flat.p_rank), int(stop.max(initial=0)))  # pieces, rounds: held to the end
    return Releases(piece.astype(narrow), stop.astype(narrow))


def peaks(flat: Flat, order: Order, bufs: Buffers, rel: Releases, tensors: Tensors, r_scratch: np.ndarray,
          n_nodes: int) -> list[int]:
    """Per node, the largest sum of bytes held at once: copies from their first use until their
    release, a piece's outputs and fetched partials until the node's piece two later."""
    def nbytes(keys):
        return flat.k_elements[keys] * tensors.itemsize[flat.k_tensor[keys]]

    def until_two_later(p):
        stop = order.rounds[flat.p_rank[p]].copy()
        later = order.next2[p] >= 0
        stop[later] = flat.p_round[order.next2[p][later]]
        return stop

    segment = excl(order.rounds + 1)
    delta = np.zeros(int(segment[-1]), I64)

    def hold(rank, start, stop, held):  # one kind at a time: no columns of all the holds at once
        np.add.at(delta, segment[rank] + start, held)
        np.add.at(delta, segment[rank] + np.minimum(stop, order.rounds[rank]), -held)

    hold(bufs.c_rank, flat.p_round[flat.r_piece[bufs.c_first_row]], rel.stop, nbytes(bufs.c_key))
    for p, keys in ((flat.o_piece, flat.o_key), (flat.r_piece[r_scratch], flat.r_key[r_scratch])):
        hold(flat.p_rank[p], flat.p_round[p], until_two_later(p), nbytes(keys))
    running = np.cumsum(delta)  # every hold ends within its node's segment: each starts at 0
    return np.maximum(np.maximum.reduceat(running, segment[:-1]), 0).tolist()
