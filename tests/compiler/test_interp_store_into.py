"""A store of one elementwise f32 operation is computed straight into the tensor
(interpreter._store_binary): the same bits as the value computed first and then stored, in every
case it takes, and every case it leaves to the general store (clipped edges, masked CTAs, other
dtypes, a scatter) still right."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.interp import interpreter
from tests.compiler.test_interp_semantics import run_src

ONE_AXIS = """
@autotune(B in [16])
kernel k(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<{c}>[N]) {{
  let i = ctx.block.x * B
  {body}
}}"""
ROWS_BY_COLUMNS = """
@autotune(B in [8])
kernel k(a: tensor<f32>[N, N], b: tensor<f32>[N, N], c: tensor<f32>[N, N]) {
  let r = ctx.block.x * B
  let q = ctx.block.y * B
  c[r :+ B, q :+ B] = a[r :+ B, q :+ B] + b[q :+ B, r :+ B]
}"""
ADD = "c[i :+ B] = a[i :+ B] + b[i :+ B]"
# name -> (source, dims, whether the store is computed into the tensor)
KERNELS = {
    "inside": (ONE_AXIS.format(c="f32", body="c[i :+ B] = a[i :+ B] / b[i :+ B]"), {"N": 64}, True),
    "scalar operand": (ONE_AXIS.format(c="f32", body="c[i :+ B] = 2.5 - a[i :+ B]"), {"N": 64}, True),
    "in place": (ONE_AXIS.format(c="f32", body="c[i :+ B] = c[i :+ B] * a[i :+ B]"), {"N": 64}, True),
    "rows by columns": (ROWS_BY_COLUMNS, {"N": 32}, True),
    "a tail past the end": (ONE_AXIS.format(c="f32", body=ADD), {"N": 70}, False),
    "f16 output": (ONE_AXIS.format(c="f16", body=ADD), {"N": 64}, False),
    "masked CTAs": (ONE_AXIS.format(c="f32", body=f"for j in range(0, ctx.block.x, 1) {{ {ADD} }}"),
                    {"N": 64}, False),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_store_computed_into_the_tensor_equals_the_value_stored(name, monkeypatch):
    source, dims, direct = KERNELS[name]
    rank = 2 if "N, N" in source else 1
    shape = (dims["N"],) * rank
    rng = np.random.default_rng(3)
    c_dtype = np.float16 if "f16" in source else np.float32
    inputs = {name: rng.standard_normal(shape, dtype=np.float32) for name in "abc"}
    inputs["c"] = inputs["c"].astype(c_dtype)
    taken = []
    real = interpreter._store_binary
    monkeypatch.setattr(interpreter, "_store_binary", lambda *a: taken.append(real(*a)) or taken[-1])
    fast = run_src(source, dims, {k: v.copy() for k, v in inputs.items()})["c"]
    monkeypatch.setattr(interpreter, "_store_binary", lambda *a: False)
    general = run_src(source, dims, {k: v.copy() for k, v in inputs.items()})["c"]
    assert fast.dtype == general.dtype and np.array_equal(fast.view(np.uint8), general.view(np.uint8))
    assert any(taken) == direct  # computed into the tensor, or left to the general store
