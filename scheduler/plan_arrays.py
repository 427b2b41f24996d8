"""The planner's passes as array operations (the rules are scheduler/planner.py's module doc).

Only `flatten` walks the program in Python, once, doing O(1) small work per region access: it
numbers the distinct regions (keys), and per piece notes its outputs (in order of first write),
the regions it reads and does not write (in order of first read), its launches, their bindings
and their writes. Every later pass works on whole columns with numpy: no Python object per
instruction is built (schemas/instruction_table.py). Rows of every table are in placement order
(piece, then the order within the piece), which is what lets "within a piece" and "on a node,
in order" be computed with cumulative sums instead of loops.

Names used throughout: `p` a piece (placement order), `o` an output row (piece, key written),
`r` a read row (piece, key read and not written: an input, or another node's partial), `c` a
copy (node, input key), `l` a launch, a binding one (launch, parameter) pair. A node is named by
its rank (its place in the planner's list of nodes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.placement import Piece

I64 = np.int64


def excl(values: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum with the total appended: len(values) + 1 entries."""
    out = np.zeros(len(values) + 1, I64)
    np.cumsum(values, out=out[1:])
    return out


def within(rows_piece: np.ndarray, weights: np.ndarray, first_row: np.ndarray) -> np.ndarray:
    """For rows sorted by piece: the sum of `weights` over the earlier rows of the same piece.
    `first_row[p]` is the first row of piece p."""
    sums = excl(weights)
    return sums[:-1] - sums[first_row[rows_piece]]


def ragged(counts: np.ndarray) -> np.ndarray:
    """0..counts[0]-1, 0..counts[1]-1, ... concatenated."""
    starts = excl(counts)
    return np.arange(starts[-1], dtype=I64) - np.repeat(starts[:-1], counts)


def first_rows(rows_piece: np.ndarray, pieces: int) -> np.ndarray:
    return excl(np.bincount(rows_piece, minlength=pieces))


@dataclass
class Flat:
    """The program as columns (see the module doc)."""

    p_rank: np.ndarray
    p_round: np.ndarray
    p_unit: np.ndarray
    o_piece: np.ndarray
    o_key: np.ndarray
    o_loaded: np.ndarray
    r_piece: np.ndarray
    r_key: np.ndarray
    l_piece: np.ndarray
    l_leaf: np.ndarray
    b_launch: np.ndarray
    b_param: np.ndarray
    b_ent: np.ndarray  # an output row o >= 0, or a read row r as -1 - r
    w_launch: np.ndarray
    w_out: np.ndarray
    k_tensor: np.ndarray  # tensor index (into the planner's tensor list) of every key
    k_elements: np.ndarray
    regions: list  # Region of every key (the first seen)
    names: list[str]


def flatten(pieces: Sequence[Piece], rank_of: Mapping[int, int], tensors: Mapping[str, int]) -> Flat:
    """One walk over the pieces' launches (see the module doc)."""
    ids: dict[tuple, int] = {}
    regions: list = []
    k_tensor, k_elements = [], []
    size_of: dict[tuple, int] = {}
    rstamp: list[int] = []  # per key: the last piece that read it, wrote it; its row there
    wstamp: list[int] = []
    slot: list[int] = []
    names: dict[str, int] = {}
    p_rank, p_round, p_unit = [], [], []
    o_piece, o_key, o_loaded, r_piece, r_key = [], [], [], [], []
    l_piece, l_leaf, b_launch, b_param, b_ent, w_launch, w_out = [], [], [], [], [], [], []

    def key_of(region) -> int:
        key = (region.tensor, region.start, region.shape)
        kid = ids.get(key)
        if kid is None:
            kid = ids[key] = len(regions)
            regions.append(region)
            k_tensor.append(tensors[region.tensor])
            size = size_of.get(region.shape)
            if size is None:
                size = size_of[region.shape] = math.prod(region.shape)
            k_elements.append(size)
            rstamp.append(-1)
            wstamp.append(-1)
            slot.append(0)
        return kid

    for p, piece in enumerate(pieces):
        p_rank.append(rank_of[piece.node])
        p_round.append(piece.round)
        p_unit.append(piece.unit.index)
        reads_here, binds = [], []
        for launch in piece.launches:
            li = len(l_piece)
            l_piece.append(p)
            l_leaf.append(names.setdefault(launch.leaf, len(names)))
            first = len(binds)
            for param, region in launch.reads:
                kid = key_of(region)
                if rstamp[kid] != p:
                    rstamp[kid] = p
                    reads_here.append(kid)
                binds.append((li, param, kid))
            for param, region in launch.writes:
                kid = key_of(region)
                if wstamp[kid] != p:  # first write in the piece: an output row
                    wstamp[kid] = p
                    slot[kid] = len(o_key)
                    o_piece.append(p)
                    o_key.append(kid)
                    o_loaded.append(rstamp[kid] == p)  # read before (or by) its first write
                w_launch.append(li)
                w_out.append(slot[kid])
                for j in range(first, len(binds)):  # a parameter bound once: the write wins
                    if binds[j][1] == param:
                        binds[j] = (li, param, kid)
                        break
                else:
                    binds.append((li, param, kid))
        for kid in reads_here:
            if wstamp[kid] != p:
                slot[kid] = -1 - len(r_key)
                r_piece.append(p)
                r_key.append(kid)
        for li, param, kid in binds:
            b_launch.append(li)
            b_param.append(names.setdefault(param, len(names)))
            b_ent.append(slot[kid])

    def arr(values, dtype=I64) -> np.ndarray:
        return np.array(values, dtype)

    return Flat(arr(p_rank), arr(p_round), arr(p_unit), arr(o_piece), arr(o_key), arr(o_loaded, bool),
                arr(r_piece), arr(r_key), arr(l_piece), arr(l_leaf), arr(b_launch), arr(b_param), arr(b_ent),
                arr(w_launch), arr(w_out), arr(k_tensor), arr(k_elements), regions, list(names))


# ------------------------------------------------------------------------------------------
# Nodes, buffers and copies
# ------------------------------------------------------------------------------------------


@dataclass
class Order:
    """Pieces per node: `order` lists them by (node, placement order), the node's part of it
    from `start[rank]`; `rounds[rank]` is the node's last round + 1 (0: no piece); `prev2` and
    `next2` name the node's piece two before and two after a piece (-1: none)."""

    order: np.ndarray
    start: np.ndarray
    rounds: np.ndarray
    prev2: np.ndarray
    next2: np.ndarray


def node_order(flat: Flat, n_nodes: int) -> Order:
    pieces = len(flat.p_rank)
    order = np.argsort(flat.p_rank, kind="stable")
    start = excl(np.bincount(flat.p_rank, minlength=n_nodes))
    rounds = np.zeros(n_nodes, I64)
    np.maximum.at(rounds, flat.p_rank, flat.p_round + 1)
    at = np.empty(pieces, I64)
    at[order] = np.arange(pieces)
    end, seq = start[flat.p_rank + 1], at - start[flat.p_rank]
    sorted_rounds = flat.p_round[order]
    same_node = flat.p_rank[order][1:] == flat.p_rank[order][:-1]
    if np.any(same_node & (sorted_rounds[1:] <= sorted_rounds[:-1])):
        raise AssertionError("a node's pieces must be in increasing rounds")
    prev2, next2 = np.full(pieces, -1, I64), np.full(pieces, -1, I64)
    ok = seq >= 2
    prev2[ok] = order[at[ok] - 2]
    ok = at + 2 < end
    next2[ok] = order[at[ok] + 2]
    return Order(order, start, rounds, prev2, next2)


@dataclass
class Buffers:
    """Every row's buffer, and the copies: per copy its node rank, key, first and last read row
    and buffer; per read row its copy (-1: a partial) and whether it is its copy's first or last."""

    o_buffer: np.ndarray
    r_buffer: np.ndarray
    node_buffers: np.ndarray
    r_copy: np.ndarray
    r_first: np.ndarray
    r_last: np.ndarray
    c_rank: np.ndarray
    c_key: np.ndarray
    c_first_row: np.ndarray
    c_last_row: np.ndarray


def number_buffers(flat: Flat, order: Order, r_scratch: np.ndarray) -> Buffers:
    """Per node, in piece order: a piece's outputs first, then in order of first read the
    partials it fetches and the input regions the node has no copy of yet (a copy keeps its
    buffer for its later pieces)."""
    pieces, keys, rows = len(flat.p_rank), len(flat.regions), len(flat.r_piece)
    inputs = np.flatnonzero(~r_scratch)
    ranks = flat.p_rank[flat.r_piece]
    uniq, first_sub, inverse = np.unique(ranks[inputs] * keys + flat.r_key[inputs], return_index=True,
                                         return_inverse=True)
    r_copy = np.full(rows, -1, I64)
    r_copy[inputs] = inverse
    c_first_row = inputs[first_sub]
    c_last_row = np.zeros(len(uniq), I64)
    np.maximum.at(c_last_row, inverse, inputs)
    r_first, r_last = np.zeros(rows, bool), np.zeros(rows, bool)
    r_first[c_first_row] = True
    r_last[c_last_row] = True
    numbered = r_scratch | r_first
    n_out = np.bincount(flat.o_piece, minlength=pieces)
    n_numbered = np.bincount(flat.r_piece[numbered], minlength=pieces)
    per_piece = excl((n_out + n_numbered)[order.order])
    base = np.empty(pieces, I64)
    base[order.order] = per_piece[:-1] - per_piece[order.start[flat.p_rank[order.order]]]
    node_buffers = per_piece[order.start[1:]] - per_piece[order.start[:-1]]
    o_buffer = base[flat.o_piece] + within(flat.o_piece, np.ones(len(flat.o_piece), I64),
                                           first_rows(flat.o_piece, pieces))
    r_buffer = base[flat.r_piece] + n_out[flat.r_piece] + within(flat.r_piece, numbered,
                                                                 first_rows(flat.r_piece, pieces))
    later = inputs[~r_first[inputs]]
    r_buffer[later] = r_buffer[c_first_row[r_copy[later]]]
    return Buffers(o_buffer, r_buffer, node_buffers, r_copy, r_first, r_last, uniq // max(keys, 1),
                   uniq % max(keys, 1), c_first_row, c_last_row)
