"""A launch's scalar arguments: each scalar parameter's value as the generated code takes it, an
f32 as np.float32 and an i32 as np.int32 of a whole number that fits (a fraction, a bool or a
value past 32 bits is the caller's mistake, refused rather than truncated or wrapped).

The one conversion behind launch.launch, launch.prepared_launch (the pods) and phobos.Kernel's
GPU calls (compiler/api/kernel.py); it imports nothing else of the compiler, so that the API can
use it on its hot path without loading the code generator."""

from __future__ import annotations

import numpy as np

from common.errors import Error

I32_RANGE = (-(2**31), 2**31 - 1)


def scalar_argument(name: str, value, dtype: str):
    """`value` for scalar parameter `name` of type `dtype` ('f32' or 'i32'); raises Error (a
    UserError, in the API's form) for an i32 value it cannot pass unchanged."""
    if dtype == "f32":
        return np.float32(value)
    if isinstance(value, bool) or not np.isfinite(value) or int(value) != value:
        _refuse(f"scalar {name} = {value} must be an integer (it is i32)")
    if not I32_RANGE[0] <= value <= I32_RANGE[1]:
        _refuse(f"scalar {name} = {value} does not fit in i32")
    return np.int32(value)


def _refuse(message: str):
    raise Error(f"error: {message}", message)
