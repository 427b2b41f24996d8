"""A node's instructions held as one packed array: the planner's output at a million units.

A frozen dataclass per instruction costs about 0.6 µs to build and a few hundred bytes to keep;
a million-unit plan has about ten million instructions. So the planner (scheduler/planner.py)
appends each instruction as a record of machine integers to one `array('q')` instead, and the
table reads as a `Sequence[Instruction]`: indexing or iterating it builds the same
`schemas.instructions` objects the pods get, only when someone asks for them. Ids are
consecutive from `first_id` (the planner numbers a node's instructions in order), so a record
does not store its id.

A record is `kind, buffer, a, b, c, ndeps, deps..., nextra, extra...` where, per kind:

    Allocate  a = shape (index into `refs`), b = dtype (index into `refs`)
    Load      a = tensor, b = region (index into `refs`)
    Fetch     a = peer, b = peer buffer
    Compute   a = leaf (index into `refs`), b = unit; extra = (parameter index into `refs`, buffer)*
    Store     a = tensor, b = region (index into `refs`), c = unit
    Free      extra = the peers that fetch the buffer

`refs` holds the few Python objects a record points to (regions, shapes, names), each appended
once by the planner and shared, never copied.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

from schemas.instructions import Allocate, Compute, Fetch, Free, Instruction, Load, Store

ALLOCATE, LOAD, FETCH, COMPUTE, STORE, FREE = range(6)
_CHUNK = 1 << 16  # records decoded per step of an iteration (bounded temporary lists)


class InstructionTable(Sequence[Instruction]):
    """Append with the kind's method (each returns the new instruction's id); read as a sequence."""

    __slots__ = ("first_id", "records", "offsets", "refs", "_ref_index")

    def __init__(self, first_id: int = 0):
        self.first_id = first_id
        self.records = array("q")
        self.offsets = array("q")  # where each record starts in `records`
        self.refs: list = []
        self._ref_index: dict = {}  # names and dtypes interned (regions and shapes are not)

    # ---- building ----------------------------------------------------------------------------

    def name(self, text: str) -> int:
        """The index of a short string (a dtype, a leaf or parameter name) in `refs`, interned."""
        at = self._ref_index.get(text)
        if at is None:
            at = self._ref_index[text] = len(self.refs)
            self.refs.append(text)
        return at

    def ref(self, obj) -> int:
        self.refs.append(obj)
        return len(self.refs) - 1

    def add(self, kind: int, buffer: int, a: int, b: int, c: int, deps: Sequence[int],
            extra: Sequence[int] = ()) -> int:
        """Append one record; returns its instruction id."""
        index = len(self.offsets)
        self.offsets.append(len(self.records))
        self.records.extend((kind, buffer, a, b, c, len(deps), *deps, len(extra), *extra))
        return self.first_id + index

    # ---- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = self.offsets[index]
        stop = self.offsets[index + 1] if index + 1 < len(self) else len(self.records)
        return self._decode(self.first_id + index, self.records[start:stop].tolist())

    def __iter__(self) -> Iterator[Instruction]:
        count = len(self)
        for first in range(0, count, _CHUNK):
            last = min(first + _CHUNK, count)
            start = self.offsets[first]
            stop = self.offsets[last] if last < count else len(self.records)
            flat = self.records[start:stop].tolist()
            ends = [self.offsets[i] - start for i in range(first + 1, last)] + [stop - start]
            at = 0
            for i, end in enumerate(ends):
                yield self._decode(self.first_id + first + i, flat[at:end])
                at = end

    def __eq__(self, other) -> bool:
        if isinstance(other, InstructionTable | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # a table is built in place; compare by contents

    def __repr__(self) -> str:
        return f"InstructionTable({len(self)} instructions from id {self.first_id})"

    def _decode(self, ident: int, rec: list[int]) -> Instruction:
        kind, buffer, a, b, c, ndeps = rec[:6]
        deps = tuple(rec[6:6 + ndeps])
        extra = rec[7 + ndeps:]
        refs = self.refs
        if kind == ALLOCATE:
            return Allocate(ident, deps, buffer, refs[a], refs[b])
        if kind == LOAD:
            return Load(ident, deps, buffer, a, refs[b])
        if kind == FETCH:
            return Fetch(ident, deps, buffer, a, b)
        if kind == COMPUTE:
            bindings = tuple((refs[extra[i]], extra[i + 1]) for i in range(0, len(extra), 2))
            return Compute(ident, deps, refs[a], bindings, b)
        if kind == STORE:
            return Store(ident, deps, buffer, a, refs[b], c)
        return Free(ident, deps, buffer, peers=tuple(extra))
