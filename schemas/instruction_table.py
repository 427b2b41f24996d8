"""A node's instructions held as columns of arrays: the planner's output at a million units.

A frozen dataclass per instruction costs about 0.6 µs to build and a few hundred bytes to keep,
and a million-unit plan has about ten million instructions. So the planner (scheduler/planning/planner.py)
computes each field of every instruction as a numpy column, and the table reads as a
`Sequence[Instruction]`: indexing or iterating it builds the same `schemas.instructions` objects
the pods get, only when someone asks for them. Ids are consecutive from `first_id` (the planner
numbers a node's instructions in order), so no column holds them.

Columns, one row per instruction (`kind` says which):

    Allocate  buffer; a = region whose shape it has (index into `keys`); b = dtype (into `names`)
    Load      buffer; a = tensor; b = region (index into `keys`)
    Fetch     buffer; a = peer; b = peer buffer
    Compute   a = leaf (into `names`); b = unit; extra = (parameter (into `names`), buffer) pairs
    Store     buffer; a = tensor; b = region (index into `keys`); extra = (unit,)
    Free      buffer; extra = the peers that fetch the buffer

The integer columns are int32 where every value of theirs fits (the planner chooses each from
its actual extremes: ids counted from a first id past 2**31, or node ids past it, make the deps,
or the fields and extras, int64), which halves the biggest arrays of a plan; decoding makes
Python ints of them either way.

`deps` and `extra` are ragged: row i's deps are `deps[dep_start[i]:dep_start[i + 1]]`. Several
nodes' tables may share one `deps`, `extra`, `keys` and `names` (views of the planner's
arrays); the starts are offsets into those shared arrays. A key is a region of the program
(`Region`), one object for every instruction that names it: the planner's keys are a sequence
that finds each region in the program's units when read (schemas/units.py, `AccessRegions`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from schemas.instructions import Allocate, Compute, Fetch, Free, Instruction, Load, Store
from schemas.program import Region

ALLOCATE, LOAD, FETCH, COMPUTE, STORE, FREE = range(6)
_CHUNK = 1 << 16  # rows decoded per step of an iteration (bounded temporary lists)


@dataclass(frozen=True, eq=False)
class InstructionTable(Sequence[Instruction]):
    first_id: int
    kind: np.ndarray  # int8, one of ALLOCATE..FREE
    buffer: np.ndarray  # int32 or int64 columns
    a: np.ndarray
    b: np.ndarray
    dep_start: np.ndarray  # len(self) + 1 offsets into `deps`
    deps: np.ndarray
    extra_start: np.ndarray  # len(self) + 1 offsets into `extra`
    extra: np.ndarray
    keys: Sequence[Region]  # the regions, shared
    names: Sequence[str]

    def __len__(self) -> int:
        return len(self.kind)

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self[i] for i in range(start, stop, step))
            return tuple(self._rows(start, max(start, stop)))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return next(self._rows(index, index + 1))

    def __iter__(self) -> Iterator[Instruction]:
        return self._rows(0, len(self))

    def __eq__(self, other) -> bool:
        if isinstance(other, InstructionTable | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # compared by contents

    def __repr__(self) -> str:
        return f"InstructionTable({len(self)} instructions from id {self.first_id})"

    def _rows(self, start: int, stop: int) -> Iterator[Instruction]:
        """Decode rows start..stop, a chunk of plain lists at a time."""
        for lo in range(start, stop, _CHUNK):
            hi = min(stop, lo + _CHUNK)
            columns = zip(range(self.first_id + lo, self.first_id + hi), self.kind[lo:hi].tolist(),
                          self.buffer[lo:hi].tolist(), self.a[lo:hi].tolist(), self.b[lo:hi].tolist(),
                          strict=True)
            dep_at, extra_at = self.dep_start[lo:hi + 1].tolist(), self.extra_start[lo:hi + 1].tolist()
            deps = self.deps[dep_at[0]:dep_at[-1]].tolist()
            extra = self.extra[extra_at[0]:extra_at[-1]].tolist()
            d0, e0 = dep_at[0], extra_at[0]
            for i, row in enumerate(columns):
                yield self._decode(row, tuple(deps[dep_at[i] - d0:dep_at[i + 1] - d0]),
                                   extra[extra_at[i] - e0:extra_at[i + 1] - e0])

    def _decode(self, row: tuple, deps: tuple[int, ...], extra: list[int]) -> Instruction:
        ident, kind, buffer, a, b = row
        if kind == ALLOCATE:
            return Allocate(ident, deps, buffer, self.keys[a].shape, self.names[b])
        if kind == LOAD:
            return Load(ident, deps, buffer, a, self.keys[b])
        if kind == FETCH:
            return Fetch(ident, deps, buffer, a, b)
        if kind == COMPUTE:
            names = self.names
            return Compute(ident, deps, names[a], tuple(zip([names[p] for p in extra[0::2]], extra[1::2],
                                                            strict=True)), b)
        if kind == STORE:
            return Store(ident, deps, buffer, a, self.keys[b], extra[0])
        return Free(ident, deps, buffer, peers=tuple(extra))
