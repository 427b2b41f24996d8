"""A launch's scalar arguments as the generated code takes them: an f32 as np.float32, an i32 as
np.int32 of what binding.scalar_value accepts (a whole number that fits; anything else refused
with one line). The one conversion behind launch.launch, launch.prepared_launch (the pods) and
phobos.Kernel's GPU calls (compiler/api/kernel.py); it imports nothing else of the code generator,
so that the API can use it on its hot path without loading the generator, and keeps numpy out of
binding.py (which `compiler check` imports)."""

from __future__ import annotations

import numpy as np

from common.errors import UserError, as_error
from compiler.frontend.binding import scalar_value


def launch_scalar(name: str, value, dtype: str):
    """`value` for scalar parameter `name` of type `dtype` (f32, i32, i64, u32, bool); an f32 goes straight
    through (the API's hot path); a refused i32 raises Error, the API's form of the UserError."""
    if dtype == "f32":
        return np.float32(value)
    try:
        return _NUMPY[dtype](scalar_value(name, value, dtype))
    except UserError as err:
        raise as_error(err) from None


_NUMPY = {"i32": np.int32, "i64": np.int64, "u32": np.uint32, "bool": np.bool_}
