"""The planner's last pass as array operations: every instruction's columns
(schemas/instruction_table.py) from the earlier passes' arrays (scheduler/planning/plan_arrays.py,
scheduler/planning/plan_columns.py). The rules are scheduler/planning/planner.py's module doc; the
names (p, o, r, c, l, rank) are scheduler/planning/plan_arrays.py's.

At a million units there are ten million instructions and twenty million deps, the planner's
biggest arrays, and on a VM the memory a plan first touches is most of its system time: so the
columns are int32 wherever their values fit, and the steps are ordered so that few big
temporaries live at once (docs/performance.md, "The planner's memory, session 10")."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from scheduler.planning.plan_arrays import Buffers, Flat, Order, first_rows, within
from scheduler.planning.plan_columns import Owners, Releases, Tensors, index_type
from schemas.arrays import I64, excl, ragged, sort_runs
from schemas.instruction_table import ALLOCATE, COMPUTE, FETCH, FREE, LOAD, STORE, InstructionTable


@dataclass
class Rows:
    """The table row of every instruction: per output row its Allocate (a loaded output's Load
    follows it), Store and Free (a partial has no Store: Free is at the Store's place); per read
    row its Allocate (the Load or Fetch follows it) and Free; per launch its Compute. A piece's
    rows: outputs' allocations and loads, new copies' allocations and gets, partials' allocations
    and fetches, computes, stores and frees of outputs, frees of partials, frees of copies last
    used here. Row `node_start[rank]` is the node's first."""

    o_alloc: np.ndarray
    o_store: np.ndarray
    o_free: np.ndarray
    r_alloc: np.ndarray
    r_free: np.ndarray
    l_row: np.ndarray
    node_start: np.ndarray


def lay_out(flat: Flat, order: Order, bufs: Buffers, stored: np.ndarray, r_scratch: np.ndarray) -> Rows:
    pieces = len(flat.p_rank)

    def count(rows_piece):
        return np.bincount(rows_piece, minlength=pieces)

    n_out, n_part = count(flat.o_piece), count(flat.r_piece[r_scratch])
    blocks = [n_out + count(flat.o_piece[flat.o_loaded]), 2 * count(flat.r_piece[bufs.r_first]),
              2 * n_part, count(flat.l_piece), n_out + count(flat.o_piece[stored]), n_part,
              count(flat.r_piece[bufs.r_last])]
    offset = list(itertools.accumulate(blocks, initial=np.zeros(pieces, I64)))  # where block k starts
    del blocks
    by_node = excl(offset[-1][order.order])
    first = np.empty(pieces, I64)
    first[order.order] = by_node[:-1]
    o_first, r_first = first_rows(flat.o_piece, pieces), first_rows(flat.r_piece, pieces)
    o_base, r_base = first[flat.o_piece], first[flat.r_piece]
    o_alloc = o_base + within(flat.o_piece, 1 + flat.o_loaded, o_first)
    o_store = o_base + offset[4][flat.o_piece] + within(flat.o_piece, 1 + stored, o_first)
    def at(k):  # where block k starts, per read row
        return offset[k][flat.r_piece]

    r_alloc = r_base + np.where(r_scratch, at(2) + 2 * within(flat.r_piece, r_scratch, r_first),
                                at(1) + 2 * within(flat.r_piece, bufs.r_first, r_first))
    r_free = r_base + np.where(r_scratch, at(5) + within(flat.r_piece, r_scratch, r_first),
                               at(6) + within(flat.r_piece, bufs.r_last, r_first))
    launches = np.arange(len(flat.l_piece))
    l_first = first_rows(flat.l_piece, pieces)
    l_row = first[flat.l_piece] + offset[3][flat.l_piece] + launches - l_first[flat.l_piece]
    row = index_type(int(by_node[-1]))  # every per-row array below is a row number
    return Rows(*(rows.astype(row) for rows in (o_alloc, o_store, o_store + stored, r_alloc, r_free, l_row)),
                by_node[order.start])


def copy_stretches(values: np.ndarray, to: np.ndarray, source: np.ndarray, first: np.ndarray,
                   length: np.ndarray, chunk: int = 1 << 20) -> None:
    """values[to[i]:to[i] + length[i]] = source[first[i]:first[i] + length[i]] for every i, about
    `chunk` values at a time: indexing all of them at once takes several index arrays as long as
    all the stretches together (the plan's biggest temporaries)."""
    ends = np.cumsum(length)
    total = int(ends[-1]) if len(ends) else 0
    bounds = np.unique(np.searchsorted(ends, np.arange(0, total + chunk, chunk), "right")).tolist()
    for lo, hi in itertools.pairwise([0, *bounds]):
        n = length[lo:hi]
        j = ragged(n)
        values[np.repeat(to[lo:hi], n) + j] = source[np.repeat(first[lo:hi], n) + j]


def ragged_starts(counts: np.ndarray) -> np.ndarray:
    """Offsets of ragged rows from their lengths (see `excl`), int32 when the total fits."""
    return excl(counts, index_type(int(counts.sum())))


def zero_starts(rows: int, total: int) -> np.ndarray:
    """The starts of `rows` ragged rows holding `total` values in all (int32 when it fits),
    zero until `add_up_starts`: row i's length goes at [i + 1] (no separate array of lengths as
    long as the rows)."""
    return np.zeros(rows + 1, index_type(total))


def add_up_starts(start: np.ndarray, total: int) -> np.ndarray:
    np.cumsum(start, out=start)
    if start[-1] != total:
        raise AssertionError("the rows' lengths do not add up to their total")
    return start


class Columns:
    """The instruction columns being filled, then cut into one table per node. Each field holds
    a buffer, region, tensor, name, unit or node id: `field` is a type that holds them all."""

    def __init__(self, total: int, field: type):
        self.kind = np.full(total, -1, np.int8)
        self.buffer, self.a, self.b = (np.zeros(total, field) for _ in range(3))

    def set(self, rows, kind, buffer=None, a=None, b=None) -> None:
        """Fill the rows' kind and the fields given (the others stay 0)."""
        self.kind[rows] = kind
        for column, values in ((self.buffer, buffer), (self.a, a), (self.b, b)):
            if values is not None:
                column[rows] = values


def instructions(flat: Flat, order: Order, bufs: Buffers, owners: Owners, rel: Releases, tensors: Tensors,
                 r_scratch: np.ndarray, node_ids: np.ndarray, first_id: int) -> list[InstructionTable]:
    """Every node's instructions (in node rank order), numbered from `first_id` node after node.
    The deps come first, then the extras, then the columns: each step's temporaries are gone
    before the next step's arrays are made, which keeps the plan's peak memory (and with it
    most of the system time: see docs/performance.md) low."""
    stored = tensors.stored[flat.k_tensor[flat.o_key]] >= 0
    rows = lay_out(flat, order, bufs, stored, r_scratch)
    writer = _partial_writers(flat, stored, r_scratch)
    dep_start, dep_values = _Deps(flat, order, bufs, rows, rel, stored, r_scratch).fill(first_id)
    field = index_type(len(flat.keys), len(flat.names), int(tensors.stored.max(initial=0)),
                       int(bufs.node_buffers.max(initial=0)), int(flat.p_unit.max(initial=0)),
                       int(node_ids.min(initial=0)), int(node_ids.max(initial=0)))
    extra_start, extra_values = _extras(flat, bufs, owners, rows, stored, writer, r_scratch, node_ids, field)
    col = Columns(int(rows.node_start[-1]), field)
    _fields(col, flat, bufs, owners, rows, tensors, stored, r_scratch, node_ids, writer)
    if np.any(col.kind < 0):
        raise AssertionError("an instruction row was left empty")
    out = []
    for rank in range(len(node_ids)):
        lo, hi = int(rows.node_start[rank]), int(rows.node_start[rank + 1])
        out.append(InstructionTable(first_id + lo, col.kind[lo:hi], col.buffer[lo:hi], col.a[lo:hi],
                                    col.b[lo:hi], dep_start[lo:hi + 1], dep_values,
                                    extra_start[lo:hi + 1], extra_values, flat.keys, flat.names))
    return out


def _partial_writers(flat: Flat, stored: np.ndarray, r_scratch: np.ndarray) -> np.ndarray:
    """Each partial read row's writer (an output row: the last to write the partial)."""
    last_writer = np.full(len(flat.keys), -1, I64)
    scratch_out = np.flatnonzero(~stored)
    np.maximum.at(last_writer, flat.o_key[scratch_out], scratch_out)
    writer = last_writer[flat.r_key[r_scratch]]
    if np.any(writer < 0):
        raise AssertionError("a partial is read that no piece writes")
    return writer


def _fields(col: Columns, flat: Flat, bufs: Buffers, owners: Owners, rows: Rows, tensors: Tensors,
            stored: np.ndarray, r_scratch: np.ndarray, node_ids: np.ndarray, writer: np.ndarray) -> None:
    """Kind and fields of every row."""
    o_tensor, r_tensor = flat.k_tensor[flat.o_key], flat.k_tensor[flat.r_key]
    col.set(rows.o_alloc, ALLOCATE, bufs.o_buffer, flat.o_key, tensors.dtype_name[o_tensor])
    ld = flat.o_loaded
    col.set(rows.o_alloc[ld] + 1, LOAD, bufs.o_buffer[ld], tensors.stored[o_tensor[ld]], flat.o_key[ld])
    col.set(rows.o_store[stored], STORE, bufs.o_buffer[stored], tensors.stored[o_tensor[stored]],
            flat.o_key[stored])
    col.set(rows.o_free, FREE, bufs.o_buffer)
    new = np.flatnonzero(bufs.r_first | r_scratch)
    col.set(rows.r_alloc[new], ALLOCATE, bufs.r_buffer[new], flat.r_key[new],
            tensors.dtype_name[r_tensor[new]])
    first = np.flatnonzero(bufs.r_first)
    mine = first[owners.c_owner[bufs.r_copy[first]]]
    col.set(rows.r_alloc[mine] + 1, LOAD, bufs.r_buffer[mine], tensors.stored[r_tensor[mine]],
            flat.r_key[mine])
    theirs = first[~owners.c_owner[bufs.r_copy[first]]]
    source = owners.g_owner[owners.c_group[bufs.r_copy[theirs]]]
    col.set(rows.r_alloc[theirs] + 1, FETCH, bufs.r_buffer[theirs], node_ids[bufs.c_rank[source]],
            bufs.r_buffer[bufs.c_first_row[source]])
    partials = np.flatnonzero(r_scratch)
    col.set(rows.r_alloc[partials] + 1, FETCH, bufs.r_buffer[partials],
            node_ids[flat.p_rank[flat.o_piece[writer]]], bufs.o_buffer[writer])
    freed = np.flatnonzero(r_scratch | bufs.r_last)
    col.set(rows.r_free[freed], FREE, bufs.r_buffer[freed])
    col.set(rows.l_row, COMPUTE, a=flat.l_leaf, b=flat.p_unit[flat.l_piece])


def binding_buffers(flat: Flat, bufs: Buffers) -> np.ndarray:
    """Every binding's buffer (on its launch's node)."""
    is_out = flat.b_ent >= 0
    out = np.empty(len(flat.b_ent), I64)
    out[is_out] = bufs.o_buffer[flat.b_ent[is_out]]
    out[~is_out] = bufs.r_buffer[-1 - flat.b_ent[~is_out]]
    return out


class _Deps:
    """Every row's deps, as rows (ids less first_id) until `fill` turns them into ids:

    Allocate   the gate of its piece: the frees of the outputs of the node's piece two before,
               then the frees of the copies released at this piece (in order of creation)
    Load/Fetch its Allocate, the row before it
    Compute    the producers of its bindings (each buffer's last writer before it), in binding
               order, each once
    Store      the last compute writing its output; a stored output's Free: its Store
    Free       of a partial output: its users (the computes binding it); of a fetched partial or a
               copy last used here: its get, then its users (a copy's over all the node's pieces)
    """

    def __init__(self, flat: Flat, order: Order, bufs: Buffers, rows: Rows, rel: Releases, stored, r_scratch):
        self.flat, self.order, self.bufs, self.rows, self.rel = flat, order, bufs, rows, rel
        self.stored, self.r_scratch = stored, r_scratch
        self.launches = len(flat.l_piece)
        self.write_keys = np.sort(flat.w_out * (self.launches + 1) + flat.w_launch)
        is_out = flat.b_ent >= 0
        self.b_out, self.b_read = flat.b_ent[is_out], -1 - flat.b_ent[~is_out]
        self.is_out = is_out
        self.r_get = rows.r_alloc + 1

    def last_write_before(self, outputs: np.ndarray, launches: np.ndarray) -> np.ndarray:
        """The row of the last compute writing each output before the launch (-1: none)."""
        at = np.searchsorted(self.write_keys, outputs * (self.launches + 1) + launches) - 1
        found = self.write_keys[np.maximum(at, 0)]
        hit = (at >= 0) & (found // (self.launches + 1) == outputs)
        return np.where(hit, self.rows.l_row[found % (self.launches + 1)], -1)

    def copy_get(self, reads: np.ndarray) -> np.ndarray:
        return self.r_get[self.bufs.c_first_row[self.bufs.r_copy[reads]]]

    def fill(self, first_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(start, ids): row i's deps are ids[start[i]:start[i + 1]]. Each kind of dep is placed
        then dropped, so that few of the big temporaries live at once."""
        flat, rows = self.flat, self.rows
        singles, users, gate = self._singles(), self._users(), self._gate()
        producers, kept = self._compute_deps()
        free_rows, get_first, gets, *used = users
        alloc_rows, *gated = gate
        per_launch = np.bincount(flat.b_launch[kept], minlength=self.launches)
        total = len(singles[0]) + int(np.count_nonzero(get_first) + used[-1].sum() + gated[-1].sum()
                                      + per_launch.sum())
        start = zero_starts(int(rows.node_start[-1]), total)
        counts = start[1:]
        counts[singles[0]] = 1
        counts[free_rows] = get_first + used[-1]
        counts[alloc_rows] = gated[-1]
        counts[rows.l_row] = per_launch
        add_up_starts(start, total)
        values = np.empty(int(start[-1]), index_type(first_id, first_id + int(rows.node_start[-1])))
        values[start[singles[0]]] = singles[1]
        del singles
        at = start[free_rows]
        values[at[get_first]] = gets
        copy_stretches(values, at + get_first, *used)
        del users, used, at
        copy_stretches(values, start[alloc_rows], *gated)
        del gate, gated
        b_first = first_rows(flat.b_launch, self.launches)
        rank = within(flat.b_launch, kept, b_first)[kept]
        values[start[rows.l_row[flat.b_launch[kept]]] + rank] = producers[kept]
        values += first_id
        return start, values

    def _singles(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, their one dep): loads and gets after their allocation, stores, stored frees."""
        flat, rows, stored = self.flat, self.rows, self.stored
        new = np.flatnonzero(self.bufs.r_first | self.r_scratch)
        loaded = rows.o_alloc[flat.o_loaded]
        outputs = np.flatnonzero(stored)
        last = self.last_write_before(outputs, np.full(len(outputs), self.launches))
        return (np.concatenate([loaded + 1, self.r_get[new], rows.o_store[outputs], rows.o_free[outputs]]),
                np.concatenate([loaded, rows.r_alloc[new], last, rows.o_store[outputs]]))

    def _users(self) -> tuple[np.ndarray, ...]:
        """Frees that wait for their buffer's users: (rows, whether the get comes first, the gets,
        then as `copy_stretches` takes them: the users' rows, where each free's start, how many).
        A buffer is named by the row that makes it (an output, a partial read, a copy's first
        read): one on its node, so bindings group by it without sorting by (node, buffer)."""
        flat, bufs, rows = self.flat, self.bufs, self.rows
        outs = len(flat.o_piece)

        def made_by(reads):  # the row number, past the outputs, of the read that makes the buffer
            return outs + np.where(self.r_scratch[reads], reads, bufs.c_first_row[bufs.r_copy[reads]])

        b_made = flat.b_ent.copy()
        b_made[~self.is_out] = made_by(self.b_read)
        users = np.argsort(b_made, kind="stable")
        per_buffer = np.bincount(b_made, minlength=outs + len(flat.r_piece))
        del b_made
        scratch_out = np.flatnonzero(~self.stored)
        partials = np.flatnonzero(self.r_scratch)
        last = np.flatnonzero(bufs.r_last)
        free_rows = np.concatenate([rows.o_free[scratch_out], rows.r_free[partials], rows.r_free[last]])
        freed = np.concatenate([scratch_out, made_by(partials), made_by(last)])
        first, length = excl(per_buffer)[freed], per_buffer[freed]
        get_first = np.arange(len(free_rows)) >= len(scratch_out)
        if np.any((length == 0) & ~get_first):
            raise AssertionError("a partial output no compute binds")
        gets = np.concatenate([self.r_get[partials], self.copy_get(last)])
        return free_rows, get_first, gets, rows.l_row[flat.b_launch[users]], first, length

    def _gate(self) -> tuple[np.ndarray, ...]:
        """(allocation rows, then as `copy_stretches` takes them: the gate entries, where each
        row's piece's start, how many)."""
        flat, order, rows, rel, bufs = self.flat, self.order, self.rows, self.rel, self.bufs
        pieces = len(flat.p_rank)
        n_out = np.bincount(flat.o_piece, minlength=pieces)
        before = np.where(order.prev2 >= 0, n_out[np.maximum(order.prev2, 0)], 0)
        released = np.flatnonzero(rel.piece >= 0)
        length = before + np.bincount(rel.piece[released], minlength=pieces)
        start = ragged_starts(length)
        entries = np.empty(int(start[-1]), rows.o_free.dtype)
        outputs = np.flatnonzero(order.next2[flat.o_piece] >= 0)
        later = order.next2[flat.o_piece[outputs]]
        o_first = first_rows(flat.o_piece, pieces)
        entries[start[later] + outputs - o_first[flat.o_piece[outputs]]] = rows.o_free[outputs]
        released = released[np.lexsort((bufs.c_first_row[released], rel.piece[released]))]
        piece = rel.piece[released]
        rank = np.arange(len(released)) - np.searchsorted(piece, piece, "left")
        entries[start[piece] + before[piece] + rank] = rows.r_free[bufs.c_last_row[released]]
        new = np.flatnonzero(bufs.r_first | self.r_scratch)
        alloc_rows = np.concatenate([rows.o_alloc, rows.r_alloc[new]])
        alloc_piece = np.concatenate([flat.o_piece, flat.r_piece[new]])
        return alloc_rows, entries, start[alloc_piece], length[alloc_piece]

    def _compute_deps(self) -> tuple[np.ndarray, np.ndarray]:
        """Each binding's producer row, and which bindings give a dep (the first of a producer)."""
        flat = self.flat
        producers = np.empty(len(flat.b_ent), self.r_get.dtype)
        reads = self.b_read
        partial = self.r_scratch[reads]
        got = np.empty(len(reads), self.r_get.dtype)
        got[partial] = self.r_get[reads[partial]]
        got[~partial] = self.copy_get(reads[~partial])
        producers[~self.is_out] = got
        outs = self.b_out
        before = self.last_write_before(outs, flat.b_launch[self.is_out])
        start = self.rows.o_alloc[outs] + flat.o_loaded[outs]  # the Load after the Allocate, if any
        producers[self.is_out] = np.where(before >= 0, before, start)
        by, firsts = sort_runs(flat.b_launch * (int(self.rows.node_start[-1]) + 1) + producers)
        kept = np.empty(len(by), bool)
        kept[by] = firsts  # stable: a producer's first binding in its launch starts its run
        return producers, kept


def _extras(flat: Flat, bufs: Buffers, owners: Owners, rows: Rows, stored: np.ndarray, writer: np.ndarray,
            r_scratch: np.ndarray, node_ids: np.ndarray, field: type) -> tuple[np.ndarray, np.ndarray]:
    """(start, values): a compute's (parameter, buffer) pairs; a Store's unit (the only fourth
    field of any kind: a column of it would be 90% zeros); the peers a Free waits for (the
    fetchers of a partial output; of an owner's copy, the other nodes' copies in creation order)."""
    launches = len(flat.l_piece)
    fetched = owners.g_owner[owners.c_group[owners.fetchers]]
    store_rows = rows.o_store[stored]
    total = 2 * len(flat.b_launch) + len(store_rows) + len(writer) + len(fetched)
    start = zero_starts(int(rows.node_start[-1]), total)
    counts = start[1:]
    counts[rows.l_row] = 2 * np.bincount(flat.b_launch, minlength=launches)
    counts[store_rows] = 1
    partials = np.flatnonzero(r_scratch)
    np.add.at(counts, rows.o_free[writer], 1)
    owner_free = rows.r_free[bufs.c_last_row[fetched]]
    np.add.at(counts, owner_free, 1)
    add_up_starts(start, total)
    values = np.empty(int(start[-1]), field)
    b_first = first_rows(flat.b_launch, launches)
    at = start[rows.l_row[flat.b_launch]] + 2 * (np.arange(len(flat.b_launch)) - b_first[flat.b_launch])
    values[at], values[at + 1] = flat.b_param, binding_buffers(flat, bufs)
    values[start[store_rows]] = flat.p_unit[flat.o_piece[stored]]
    ranks = flat.p_rank[flat.r_piece[partials]]
    by = np.lexsort((partials, ranks, writer))
    w = writer[by]
    values[start[rows.o_free[w]] + np.arange(len(w)) - np.searchsorted(w, w, "left")] = node_ids[ranks[by]]
    group = owners.c_group[owners.fetchers]
    rank = np.arange(len(group)) - owners.fetch_start[group]
    values[start[owner_free] + rank] = node_ids[bufs.c_rank[owners.fetchers]]
    return start, values
