"""The attention scheduling changes, checked without a GPU: dot operands hoisted to the loop top
keep the kernel's meaning (the reference interpreter gives the same numbers), the longest-first
block order is chosen only where loop trip counts grow with the block index, barriers before
overwrites are elided only where another barrier already separates them, and a register tile
reaches shared memory in 16-byte stores. (On the GPU, tests/cuda/test_cuda_gpu.py runs every
example against the interpreter with all of these in place.)"""

from __future__ import annotations

import re

import novel_cases
import numpy as np
import pytest
from cuda_cases import load_example, random_inputs

from compiler.cuda import analysis
from compiler.cuda.compiled import generate_source
from compiler.cuda.hoist import hoist_dot_loads, split_operand_lets
from compiler.cuda.schedule import TF32_TMA_PROBE
from compiler.frontend import binding, ir, walk
from compiler.frontend import load as frontend
from compiler.interp import interpreter as interp


def _loop(kernel: ir.Kernel) -> ir.For:
    return next(s for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.For))


def test_causal_operands_move_to_the_loop_top_and_keep_the_result():
    kernel = load_example("causal_attention.phk")
    hoisted = hoist_dot_loads(kernel)
    body = _loop(hoisted).body
    assert [type(s) for s in body[:2]] == [ir.Let, ir.Let]
    assert [s.value.tensor for s in body[:2]] == ["K", "V"]
    assert not any(isinstance(e, ir.Load) and e.tensor in "KV" for s in body[2:] for e in walk.iter_exprs(s))
    # the rewrite is a program transformation: the interpreter must agree bit for bit
    b = binding.bind(kernel, {"N": 77}, None, {"D": 64, "BR": 32, "BC": 32})
    rng = np.random.default_rng(3)
    arrays, scalars = random_inputs(kernel, dict(b.env), rng)
    scalars["scale"] = 0.125
    ref = {n: a.copy() for n, a in arrays.items()}
    got = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars)
    interp.run_kernel(hoisted, b, got, scalars)
    np.testing.assert_array_equal(got["O"], ref["O"])


def test_an_operand_reading_a_var_or_a_stored_tensor_stays_in_place():
    kernel = frontend.load_text(
        """
@autotune(T in [16])
kernel k(A: tensor<f32>[N, T], B: tensor<f32>[T, T], C: tensor<f32>[T, T]) {
  var off: i32 = 0
  var acc: tile<f32>[T, T] = 0.0
  for i in range(0, N, T) {
    off = i
    acc += dot(A[off :+ T, :], B[0 :+ T, :])
    acc += dot(C[0 :+ T, :], B[0 :+ T, :])
  }
  C[0 :+ T, :] = acc
}
"""
    ).kernel()
    body = _loop(hoist_dot_loads(kernel)).body
    lets = [s for s in body if isinstance(s, ir.Let)]
    # only B moves: A's index reads the var `off`, C is stored by the kernel
    assert [s.value.tensor for s in lets] == ["B", "B"]


# A TF32 matmul whose K is named a_tile1: the name hoist_dot_loads gives A's inline operand
NAMED_LIKE_ITS_OPERAND = """
@autotune(TM in [128], TN in [128], TK in [32])
kernel mm(A: tensor<f32>[M, a_tile1], B: tensor<f32>[a_tile1, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, a_tile1, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN], precision = tf32)
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
"""


def test_a_hoisted_operand_takes_no_name_the_kernel_reads():
    """The analyses count a let's reads by name: a hoisted operand named like a dim that the body
    reads (here the loop's bound) lost its shared-memory staging, and the TF32 TMA schedule then
    compiled as mma.sync from registers under its own name (no tensor maps, no warpgroup MMA)."""
    kernel = frontend.load_text(NAMED_LIKE_ITS_OPERAND).kernel()
    lets = [s.name for s in _loop(hoist_dot_loads(kernel)).body if isinstance(s, ir.Let)]
    assert len(lets) == 2 and "a_tile1" not in lets
    assert set(lets) <= set(analysis.shared_lets(hoist_dot_loads(kernel).body))
    b = binding.bind(kernel, {"M": 256, "N": 256, "a_tile1": 256}, None, {"TM": 128, "TN": 128, "TK": 32})
    gen = generate_source(kernel, b, schedule=TF32_TMA_PROBE)
    assert [m.tensor for m in gen.tensor_maps] == ["A", "B"] and "wgmma" in gen.need.features


def test_a_split_copy_takes_no_name_the_kernel_reads():
    """Likewise the copy split_operand_lets makes for the exact dot (a_f32a) where K is so named."""
    kernel = novel_cases.load("tf32_and_exact")
    kernel = frontend.load_text(re.sub(r"\bK\b", "a_f32a", kernel.source)).kernel()
    assert "a_f32a" in binding.kernel_dims(kernel)
    body = split_operand_lets(hoist_dot_loads(kernel), False).body
    copies = [s.name for s in next(s for s in body if isinstance(s, ir.For)).body if isinstance(s, ir.Let)]
    assert len(copies) == 4 and "a_f32a" not in copies
    assert set(copies) <= set(analysis.shared_lets(body))


@pytest.mark.parametrize(
    "name,axes", [("causal_attention.phk", ("x",)), ("flash_attention.phk", ()), ("matmul.phk", ())]
)
def test_longest_first_only_where_trip_counts_grow_with_the_block(name, axes):
    kernel = load_example(name)
    env = {"N": 1000, "Nq": 1000, "Nk": 1000, "M": 1000, "K": 1000, "BR": 64, "BC": 64, "D": 64}
    env.update({"TILE_M": 64, "TILE_N": 64, "TILE_K": 8})
    assert analysis.longest_first_axes(kernel.body, env) == axes


def _source(name, dims, point):
    kernel = load_example(name)
    return generate_source(kernel, binding.bind(kernel, dims, None, point)).source


def test_causal_launches_the_last_rows_first():
    src = _source("causal_attention.phk", {"N": 4096}, {"D": 64, "BR": 64, "BC": 128})
    assert "((63 - (int)blockIdx.x) * c_BR)" in src
    flash = _source("flash_attention.phk", {"Nq": 4096, "Nk": 4096}, {"D": 64, "BR": 128, "BC": 64})
    assert "(((int)blockIdx.x) * c_BR)" in flash


def test_flash_key_block_costs_three_barriers_and_p_is_stored_16_bytes_wide():
    src = _source("flash_attention.phk", {"Nq": 4096, "Nk": 4096}, {"D": 64, "BR": 128, "BC": 64})
    loop = src[src.index("for (int u_j_") :]
    # K and V behind one barrier pair, then p behind one more (the loop-top barrier already
    # separates p's store from the previous iteration's reads of it); q's staging before the
    # loop needs only the barrier after it
    assert loop.count("__syncthreads();") == 3
    assert src.count("__syncthreads();") == 4
    assert re.search(r"float4\*>\(&\(smem \+ \d+\)\[_c \* 132 \+ _r\]\) = make_float4\(u_p_", loop)
