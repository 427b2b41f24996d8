"""What the emitters pass around: where an element sits (Ctx), a tile in registers (Val), a dot
operand staged in shared memory (SharedTile). Its own module so that the expression and dot
emitters both import it and not each other."""

from __future__ import annotations

from dataclasses import dataclass

LOCALS = {"2d": ("_i", "_j"), "row": ("_i",), "col": ("_j",), "flat": ("_f",)}
POSITIONS = {"2d": ("_r", "_c"), "row": ("_r",), "col": ("_c",), "flat": ("_p",)}


@dataclass(frozen=True)
class Ctx:
    """Where the element being computed sits: its tile `shape`, the layout `kind`, the C local
    indices into register arrays and the C positions inside the tile. `native`: the local
    indices are those of the layout (false inside a transposed read)."""

    shape: tuple[int, ...]
    kind: str
    local: tuple[str, ...]
    pos: tuple[str, ...]
    native: bool = True

    @property
    def standard(self) -> bool:
        return self.native and self.local == LOCALS[self.kind]


@dataclass
class Val:
    """A tile held in registers: `cname[count0][count1]` in layout `kind`."""

    cname: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    ty_shape: tuple = ()


@dataclass
class SharedTile:
    """A dot operand staged in shared memory as S[k][x] (row stride `ld`), `role` 'a' or 'b'."""

    ptr: str
    role: str
    k: int
    x: int
    ld: int
