"""The element types of phobos: one row per dtype, read by every layer that names one (storage,
the schemas' item sizes, the parser's type names, the checker, the interpreter's numpy dtypes,
the CUDA types, the Python API's torch/cupy dtypes), so adding a dtype is adding a row here, plus
its type rules (compiler/frontend/check_types.py, compiler/interp/values.py) and its
docs/language.md §4.2-4.3 row.

`numpy()` gives the host dtype. ml_dtypes' types (bf16, the fp8 formats) are made on first use:
importing ml_dtypes costs about 10 ms of each process's start-up, and a job without such tensors
never pays it (docs/performance.md). `ml_name` is ml_dtypes' name of the type, which is also what
a .npy header written by phobos says (numpy itself would write an opaque '<V2' or '<V1').

kind: "float" (f32), "narrow" (bf16, f16: values held as exact f32, dot operands and storage),
"fp8" (e4m3, e5m2: read-only dot operands with explicit scales, docs/language.md §4.2), "int"
(i32, i64), "uint" (u32, u8), "bool".

- `device`: what a cupy buffer of it holds (cupy has no bf16 or fp8: their bit patterns).
- `value`: the type a load of such a tensor (or a scalar parameter of it) gives: narrow storage
  keeps its own name; u8 widens to i32, as C's integer promotion does.
- `ctype`: the C type of a register holding a value of this type (narrow values are floats).
- `scalar`: a scalar parameter may have it; `tile`: tiles and lets may hold it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.errors import UserError

if TYPE_CHECKING:  # numpy is imported where a dtype is made: the parser reads this table without it
    import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str
    cuda_storage: str  # the C type of one element in memory
    plain: str = ""  # numpy's own name of the type ("" for an ml_dtypes type)
    ml_name: str = ""  # ml_dtypes' name (bfloat16, float8_e4m3fn, ...)
    device: str = ""  # numpy's name of what a cupy buffer holds ("" : the host dtype)
    value: str = ""  # the value type of a load ("" : the name itself)
    ctype: str = "float"
    torch: str = ""
    scalar: bool = False
    tile: bool = True

    def numpy(self) -> np.dtype:
        import numpy as np

        if self.plain:
            return np.dtype(self.plain)
        return np.dtype(getattr(ml_dtypes(), self.ml_name))

    @property
    def integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def narrow(self) -> bool:
        """A narrow float (bf16, f16, fp8): values exactly representable in it, arithmetic in f32."""
        return self.kind in ("narrow", "fp8")

    @property
    def storage_ctype(self) -> str:
        return self.cuda_storage

    @property
    def value_type(self) -> str:
        return self.value or self.name


TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("f32", 4, "float", "float", plain="<f4", torch="torch.float32", scalar=True),
        DType("f16", 2, "narrow", "unsigned short", plain="<f2", torch="torch.float16"),
        DType("bf16", 2, "narrow", "unsigned short", ml_name="bfloat16", device="<u2",
              torch="torch.bfloat16"),
        DType("i32", 4, "int", "int", plain="<i4", ctype="int", torch="torch.int32", scalar=True),
        DType("i64", 8, "int", "long long", plain="<i8", ctype="long long", torch="torch.int64", scalar=True),
        DType("u32", 4, "uint", "unsigned", plain="<u4", ctype="unsigned", torch="torch.uint32", scalar=True),
        DType("u8", 1, "uint", "unsigned char", plain="|u1", value="i32", ctype="int", torch="torch.uint8",
              tile=False),
        DType("bool", 1, "bool", "bool", plain="|b1", ctype="bool", torch="torch.bool", scalar=True),
        DType("e4m3", 1, "fp8", "unsigned char", ml_name="float8_e4m3fn", device="|u1",
              torch="torch.float8_e4m3fn"),
        DType("e5m2", 1, "fp8", "unsigned char", ml_name="float8_e5m2", device="|u1",
              torch="torch.float8_e5m2"),
    )
}
DTYPES = TABLE  # the name this table had on branch lang
NAMES: tuple[str, ...] = tuple(TABLE)
FP8: tuple[str, ...] = tuple(n for n, d in TABLE.items() if d.kind == "fp8")
ITEMSIZE: dict[str, int] = {n: d.itemsize for n, d in TABLE.items()}


def ml_dtypes():
    """The ml_dtypes module, imported on first use (numpy has no bf16 or fp8 of its own)."""
    try:
        import ml_dtypes as module
    except ImportError:
        raise UserError("bf16 and fp8 tensors need the ml_dtypes package (pip install ml_dtypes)") from None
    return module


def ml_name_of(dtype: np.dtype) -> str | None:
    """The phobos name of an ml_dtypes dtype (bf16, e4m3, e5m2), None for any other. An array or
    header can only have such a dtype once ml_dtypes is loaded: no import to test it."""
    if "ml_dtypes" not in sys.modules or dtype.kind not in "Vf":  # (e5m2 says kind f)
        return None
    for d in TABLE.values():
        if d.ml_name and dtype == d.numpy():
            return d.name
    return None


def get(name: str) -> DType:
    return TABLE[name]


def names(*, storage: bool = False, scalar: bool = False, tile: bool = False) -> tuple[str, ...]:
    """The dtype names with every asked-for property, in table order (every dtype is a storage
    dtype)."""
    return tuple(d.name for d in TABLE.values() if (d.scalar or not scalar) and (d.tile or not tile))


def numpy_dtype(name: str) -> np.dtype:
    """The host numpy dtype of a tensor of `name`."""
    return TABLE[name].numpy()


def device_dtype(name: str) -> np.dtype:
    """The numpy dtype of a device (cupy) buffer of `name` (bf16, fp8: their bit patterns)."""
    import numpy as np

    d = TABLE[name]
    return np.dtype(d.device) if d.device else d.numpy()


def itemsize(name: str) -> int:
    return TABLE[name].itemsize


def of_numpy(dtype) -> str | None:
    """The storage dtype name of numpy dtype `dtype`, None when it is none of them."""
    import numpy as np

    dtype = np.dtype(dtype)
    found = ml_name_of(dtype)
    if found is not None:
        return found
    return next((d.name for d in TABLE.values() if d.plain and np.dtype(d.plain) == dtype), None)


def to_storage(values, dtype, path):
    """`values` converted to storage dtype `dtype` for writing to `path` (common/storage.py):
    floats round to nearest even, integers convert exactly, and a value an integer type cannot
    hold is refused."""
    import numpy as np

    values = np.asarray(values)
    if values.dtype == dtype:
        return values  # a tile held in the storage dtype is stored as it is
    if dtype.kind == "b":
        return values != 0
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        exact = values.dtype.kind in "iub"  # integers convert exactly, when they fit
        wide = values.astype(np.uint64 if values.dtype.kind == "u" else np.int64) if exact else np.rint(
            np.asarray(values, dtype=np.float64))
        bad = not exact and not np.isfinite(wide).all()
        if wide.size and (bad or wide.min() < info.min or wide.max() > info.max):
            raise UserError(f"{path}: a value does not fit {dtype} (NaN, inf or out of range)")
        return wide.astype(dtype)
    values = np.asarray(values, dtype=np.float32)
    return values.astype(dtype)  # f16 and bf16 (ml_dtypes) casts round to nearest, ties to even
