"""The planner's passes as array operations (the rules are scheduler/planning/planner.py's module doc).

No pass walks the program's objects: the units come as columns (schemas/units.py,
`UnitColumns`), and `flatten` gathers the placed launches' accesses from them, numbers the
distinct regions (keys), and per piece notes its outputs (in order of first write), the regions
it reads and does not write (in order of first read), its launches, their bindings and their
writes. Every pass works on whole columns with numpy: no Python object per access or per
instruction is built (schemas/instruction_table.py). Rows of every table are in placement order
(piece, then the order within the piece), which is what lets "within a piece" and "on a node,
in order" be computed with cumulative sums instead of loops.

Names used throughout: `p` a piece (placement order), `o` an output row (piece, key written),
`r` a read row (piece, key read and not written: an input, or another node's partial), `c` a
copy (node, input key), `l` a launch, a binding one (launch, parameter) pair. A node is named by
its rank (its place in the planner's list of nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.planning.placement import Placed
from schemas.arrays import I64, excl, sort_runs, spans
from schemas.units import Region, UnitColumns


def within(rows_piece: np.ndarray, weights: np.ndarray, first_row: np.ndarray) -> np.ndarray:
    """For rows sorted by piece: the sum of `weights` over the earlier rows of the same piece.
    `first_row[p]` is the first row of piece p."""
    sums = excl(weights)
    return sums[:-1] - sums[first_row[rows_piece]]


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
    keys: Sequence[Region]  # every key: its region (looked up or made when asked for)
    names: list[str]


def flatten(placed: Placed, tensors: Mapping[str, int]) -> Flat:
    """The program as columns: the placed launches' accesses gathered from the units' columns
    (schemas/units.py), their regions numbered as keys, then grouped with numpy."""
    units, l_launch = placed.units, placed.l_launch
    n_launches = len(l_launch)
    a_index = spans(units.access_start, l_launch)  # the accesses, in placement order
    a_launch = np.repeat(np.arange(n_launches, dtype=I64), np.diff(units.access_start)[l_launch])
    a_key, key_access = number_keys(units, a_index)
    # names: the parameters in order of first access, then the leaves in order of first launch
    seen = [*first_seen(units.param[a_index], len(units.names)).tolist(),
            *first_seen(units.leaf[l_launch], len(units.names)).tolist()]
    order = list(dict.fromkeys(seen))
    number = np.full(len(units.names), -1, I64)
    number[order] = np.arange(len(order))
    a_write = units.write[a_index]
    rows = _piece_rows(placed.l_piece[a_launch], a_key, a_write, a_launch, number[units.param[a_index]],
                       len(key_access))
    del a_index
    known = np.array([tensors.get(name, -1) for name in units.names], I64)
    k_tensor = known[units.tensor[key_access]]
    if np.any(k_tensor < 0):
        raise KeyError(units.names[units.tensor[key_access[np.argmax(k_tensor < 0)]]])
    ndim = units.ndim[key_access]
    shape = units.shape[key_access]
    k_elements = np.where(np.arange(shape.shape[1]) < ndim[:, None], shape, 1).prod(axis=1, dtype=I64)
    return Flat(p_rank=placed.rank, p_round=placed.round, p_unit=placed.unit,
                l_piece=placed.l_piece, l_leaf=number[units.leaf[l_launch]], **rows,
                k_tensor=k_tensor, k_elements=k_elements, keys=units.regions(key_access),
                names=[units.names[i] for i in order])


def first_seen(codes: np.ndarray, bound: int) -> np.ndarray:
    """The distinct values of `codes` (all in 0..bound-1) in order of first appearance."""
    small = codes.astype(np.uint16) if bound <= 1 << 16 else codes  # a 16-bit stable sort is a radix sort
    by, starts = sort_runs(small)
    firsts = by[starts]
    return codes[np.sort(firsts)]


def number_keys(units: UnitColumns, accesses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each access's key (equal regions one key, keys numbered by first access) and every key's
    first access (a position among the units' accesses). Regions are equal when their tensor,
    start and shape are: those columns are packed into one integer where their ranges allow
    (else sorted together), and the codes sorted (stable, so a group's first member is its first
    access)."""
    count = len(accesses)
    by, starts = units.region_runs(accesses)
    if starts.all():  # every region distinct (an elementwise program): each access its own key
        return np.arange(count, dtype=I64), accesses
    group_sorted = np.cumsum(starts) - 1
    first_sorted = by[starts]  # per group (in sorted order): its first access
    number = np.empty(len(first_sorted), I64)  # per group (in sorted order): its key
    number[np.argsort(first_sorted)] = np.arange(len(first_sorted))
    access_key = np.empty(count, I64)
    access_key[by] = number[group_sorted]
    return access_key, accesses[np.sort(first_sorted)]


def _piece_rows(a_piece, a_key, a_write, a_launch, a_param, keys: int) -> dict[str, np.ndarray]:
    """Per piece, from its accesses (reads then writes of each launch, in order): its outputs by
    first write (loaded when read before or by that launch), the keys it only reads by first
    read, its writes, and its bindings: one per (launch, parameter), the write's where a
    parameter is both read and written."""
    count = len(a_key)
    by, starts = sort_runs(a_piece * max(keys, 1) + a_key)
    group_sorted = np.cumsum(starts) - 1
    groups = int(group_sorted[-1]) + 1 if count else 0
    group = np.empty(count, I64)
    group[by] = group_sorted
    g_first = by[starts]
    writes_sorted = np.flatnonzero(a_write[by])
    write_group = group_sorted[writes_sorted]
    del group_sorted, starts  # the 1M-unit plan's peak is here: drop what is done with
    first_write = np.ones(len(write_group), bool)
    first_write[1:] = write_group[1:] != write_group[:-1]
    g_write = np.full(groups, -1, I64)
    g_write[write_group[first_write]] = by[writes_sorted[first_write]]
    del by, writes_sorted, write_group
    outs = np.flatnonzero(g_write >= 0)
    outs = outs[np.argsort(g_write[outs], kind="stable")]
    reads = np.flatnonzero(g_write < 0)
    reads = reads[np.argsort(g_first[reads], kind="stable")]
    del g_write
    entity = np.empty(groups, I64)
    entity[outs] = np.arange(len(outs))
    entity[reads] = -1 - np.arange(len(reads))
    bound = _bindings(a_launch, a_param)
    return dict(o_piece=a_piece[g_first[outs]], o_key=a_key[g_first[outs]], o_loaded=~a_write[g_first[outs]],
                r_piece=a_piece[g_first[reads]], r_key=a_key[g_first[reads]],
                b_launch=a_launch[bound[0]], b_param=a_param[bound[0]], b_ent=entity[group[bound[1]]],
                w_launch=a_launch[a_write], w_out=entity[group[a_write]])


def _bindings(a_launch: np.ndarray, a_param: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each binding's parameter first appears in its launch, its last access there)."""
    by, starts = sort_runs(a_launch * (int(a_param.max(initial=0)) + 1) + a_param)
    ends = np.ones(len(starts), bool)
    ends[:-1] = starts[1:]
    first, last = by[starts], by[ends]
    order = np.argsort(first, kind="stable")
    return first[order], last[order]


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
    pieces, keys, rows = len(flat.p_rank), len(flat.keys), len(flat.r_piece)
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
