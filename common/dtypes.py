"""The element types of phobos: one table, read by every layer that names a dtype (the parser's
type names, the checker's promotion, the interpreter's numpy dtypes, the CUDA types, .npy I/O,
the Python API's torch/cupy dtypes, the wire's item sizes). Adding a dtype is adding one row here,
plus its promotion and conversion rules (compiler/frontend/check_types.py, compiler/interp/values.py)
and its docs/language.md §2 row.

- `numpy`: the host dtype of a tensor of this type ('<i8'; 'ml_dtypes:bfloat16' is imported on
  first use, so a process that never meets bf16 never loads ml_dtypes).
- `device`: what a cupy buffer of it holds (cupy has no bf16: its 16-bit pattern as '<u2').
- `value`: the type a load of such a tensor (or a scalar parameter of it) gives: narrow storage
  (bf16, f16) keeps its own name (values exact in it, arithmetic in f32); u8 widens to i32, as
  C's integer promotion does.
- `ctype`: the C type of a register holding a value of this type (bf16/f16 values are floats);
  `storage_ctype`: the C type of one element in global memory.
- `storage`: a tensor may hold it (`tensor<...>`); `scalar`: a scalar parameter may have it;
  `tile`: tiles, lets and vars may hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

Kind = Literal["float", "int", "uint", "bool"]


@dataclass(frozen=True)
class DType:
    name: str
    kind: Kind
    bits: int
    numpy: str
    device: str
    value: str
    ctype: str
    storage_ctype: str
    torch: str
    storage: bool = True
    scalar: bool = False
    tile: bool = True

    @property
    def integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def narrow(self) -> bool:
        """A narrow float: values exactly representable in it, arithmetic in f32."""
        return self.kind == "float" and self.name != "f32"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)


_ROWS = (
    DType("f32", "float", 32, "<f4", "<f4", "f32", "float", "float", "torch.float32", scalar=True),
    DType("f16", "float", 16, "<f2", "<f2", "f16", "float", "unsigned short", "torch.float16"),
    DType("bf16", "float", 16, "ml_dtypes:bfloat16", "<u2", "bf16", "float", "unsigned short",
          "torch.bfloat16"),
    DType("i32", "int", 32, "<i4", "<i4", "i32", "int", "int", "torch.int32", scalar=True),
    DType("i64", "int", 64, "<i8", "<i8", "i64", "long long", "long long", "torch.int64", scalar=True),
    DType("u32", "uint", 32, "<u4", "<u4", "u32", "unsigned", "unsigned", "torch.uint32", scalar=True),
    DType("u8", "uint", 8, "|u1", "|u1", "i32", "int", "unsigned char", "torch.uint8", tile=False),
    DType("bool", "bool", 8, "|b1", "|b1", "bool", "bool", "bool", "torch.bool", scalar=True),
)
DTYPES: dict[str, DType] = {row.name: row for row in _ROWS}

_resolved: dict[str, np.dtype] = {}


def get(name: str) -> DType:
    return DTYPES[name]


def names(*, storage: bool = False, scalar: bool = False, tile: bool = False) -> tuple[str, ...]:
    """The dtype names with every asked-for property, in table order."""
    return tuple(r.name for r in _ROWS if (r.storage or not storage) and (r.scalar or not scalar)
                 and (r.tile or not tile))


def _resolve(spec: str) -> np.dtype:
    found = _resolved.get(spec)
    if found is None:
        import numpy as np  # here, not at the top: the parser reads this table without numpy

        if spec.startswith("ml_dtypes:"):
            from common.errors import UserError

            try:
                import ml_dtypes
            except ImportError:
                raise UserError("this dtype needs the ml_dtypes package (pip install ml_dtypes)") from None
            found = np.dtype(getattr(ml_dtypes, spec.split(":", 1)[1]))
        else:
            found = np.dtype(spec)
        _resolved[spec] = found
    return found


def numpy_dtype(name: str) -> np.dtype:
    """The host numpy dtype of a tensor of `name`."""
    return _resolve(DTYPES[name].numpy)


def device_dtype(name: str) -> np.dtype:
    """The numpy dtype of a device (cupy) buffer of `name` (bf16: its bit pattern)."""
    return _resolve(DTYPES[name].device)


def itemsize(name: str) -> int:
    return DTYPES[name].itemsize


def of_numpy(dtype) -> str | None:
    """The storage dtype name of numpy dtype `dtype`, None when it is none of them. A dtype that
    needs ml_dtypes can only exist once ml_dtypes is loaded, so the test imports nothing."""
    import sys

    import numpy as np

    dtype = np.dtype(dtype)
    for row in _ROWS:
        if row.numpy.startswith("ml_dtypes:"):
            if "ml_dtypes" in sys.modules and dtype == _resolve(row.numpy):
                return row.name
        elif dtype == _resolve(row.numpy):
            return row.name
    return None
