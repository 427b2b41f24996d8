"""run_kernel's contract with its callers (the run command, pods): arguments are checked up front
and every mistake is one UserError line; nothing is written when the arguments are wrong."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from common.errors import UserError
from compiler.frontend.binding import bind
from compiler.frontend.load import load_file, load_text
from compiler.interp.interpreter import run_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def axpby():
    kernel = load_file(EXAMPLES / "axpby.phk").kernel()
    return kernel, bind(kernel, {"M": 10, "N": 20})


def tensors(**over):
    base = {"x": np.ones((10, 20), np.float32), "y": np.ones((10, 20), np.float32),
            "out": np.zeros((10, 20), np.float32)}
    return {**base, **over}


@pytest.mark.parametrize("args,message", [
    ((tensors(x=np.ones((10, 20))), {"alpha": 1, "beta": 1}),
     "tensor x: the kernel expects f32, got an array of float64"),
    ((tensors(x=np.ones((20, 10), np.float32)), {"alpha": 1, "beta": 1}),
     "tensor x: expected shape (10, 20), got (20, 10)"),
    (({"x": np.ones((10, 20), np.float32)}, {"alpha": 1, "beta": 1}), "missing tensor y for kernel axpby"),
    ((tensors(), {"alpha": 1}), "missing scalar beta for kernel axpby"),
    ((tensors(), {"alpha": 1, "beta": 1, "gamma": 2}), "kernel axpby has no scalar parameter gamma"),
])
def test_bad_arguments_are_one_line_user_errors(args, message):
    kernel, binding = axpby()
    with pytest.raises(UserError) as info:
        run_kernel(kernel, binding, *args)
    assert message in str(info.value) and "\n" not in str(info.value)
    if "out" in args[0]:
        assert not args[0]["out"].any()  # nothing written


def test_read_only_output_is_refused():
    kernel, binding = axpby()
    out = np.zeros((10, 20), np.float32)
    out.flags.writeable = False
    with pytest.raises(UserError, match="stores to it, but the array is read-only"):
        run_kernel(kernel, binding, tensors(out=out), {"alpha": 1, "beta": 1})


def test_i32_scalars_take_whole_numbers_only():
    src = """
@autotune(B in [4])
kernel k(x: tensor<i32>[N], s: i32) {
  x[ctx.block.x * B :+ B] = x[ctx.block.x * B :+ B] + s
}
"""
    kernel = load_text(src).kernel()
    x = np.zeros(6, np.int32)
    run_kernel(kernel, bind(kernel, {"N": 6}), {"x": x}, {"s": 3.0})
    assert (x == 3).all()
    with pytest.raises(UserError, match="s = 2.5 must be an integer"):
        run_kernel(kernel, bind(kernel, {"N": 6}), {"x": x}, {"s": 2.5})
    # the same rule as the launches' and job files' (binding.scalar_value): no wrapping past 32 bits
    with pytest.raises(UserError, match=r"^scalar s = 2147483648 does not fit in i32$"):
        run_kernel(kernel, bind(kernel, {"N": 6}), {"x": x}, {"s": 2**31})


def test_bf16_arrays_must_be_ml_dtypes_bfloat16():
    src = """
@autotune(B in [4])
kernel k(x: tensor<bf16>[N], y: tensor<f32>[N]) {
  y[ctx.block.x * B :+ B] = x[ctx.block.x * B :+ B]
}
"""
    kernel = load_text(src).kernel()
    y = np.zeros(6, np.float32)
    run_kernel(kernel, bind(kernel, {"N": 6}), {"x": np.arange(6).astype(ml_dtypes.bfloat16), "y": y}, {})
    np.testing.assert_array_equal(y, np.arange(6))
    with pytest.raises(UserError, match="expects bf16"):
        run_kernel(kernel, bind(kernel, {"N": 6}), {"x": np.zeros(6, np.float16), "y": y}, {})


def test_input_sharing_memory_with_an_output_is_read_before_it_changes():
    """Two parameters given views of one buffer: a load of the input must not be a live view
    that a later store in the same kernel run changes under it."""
    src = """
@autotune(B in [4])
kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
  let i = ctx.block.x * B
  let old = x[i :+ B]
  y[i :+ B] = old + 1.0
  y[i :+ B] += old
}
"""
    kernel = load_text(src).kernel()
    buffer = np.arange(8, dtype=np.float32)
    run_kernel(kernel, bind(kernel, {"N": 8}), {"x": buffer, "y": buffer}, {})
    # y = x + 1, then y += old x: (x + 1) + x
    np.testing.assert_array_equal(buffer, 2 * np.arange(8) + 1)
