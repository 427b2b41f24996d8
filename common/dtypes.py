"""The storage element types: one row per dtype, read by storage, the schemas, the front end and
the CUDA code generator (so adding a dtype is adding a row here, plus its type rules).

`numpy()` gives the host dtype. ml_dtypes' types (bf16, the fp8 formats) are made on first use:
importing ml_dtypes costs about 10 ms of each process's start-up, and a job without such tensors
never pays it (docs/performance.md). `ml_name` is ml_dtypes' name of the type, which is also what
a .npy header written by phobos says (numpy itself would write an opaque '<V2' or '<V1').

kind: "float" (f32), "narrow" (bf16, f16: values held as exact f32, dot operands and storage),
"fp8" (e4m3, e5m2: read-only dot operands with explicit scales, docs/language.md §4.2), "int".
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from common.errors import UserError


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str
    cuda_storage: str  # the C type of one element in memory
    plain: str = ""  # numpy's own name of the type ("" for an ml_dtypes type)
    ml_name: str = ""  # ml_dtypes' name (bfloat16, float8_e4m3fn, ...)

    def numpy(self) -> np.dtype:
        if self.plain:
            return np.dtype(self.plain)
        return np.dtype(getattr(ml_dtypes(), self.ml_name))


TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("f32", 4, "float", "float", plain="<f4"),
        DType("f16", 2, "narrow", "unsigned short", plain="<f2"),
        DType("bf16", 2, "narrow", "unsigned short", ml_name="bfloat16"),
        DType("i32", 4, "int", "int", plain="<i4"),
        DType("e4m3", 1, "fp8", "unsigned char", ml_name="float8_e4m3fn"),
        DType("e5m2", 1, "fp8", "unsigned char", ml_name="float8_e5m2"),
    )
}
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
