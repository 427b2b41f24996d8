"""Issue 36 item 1 on CPU: how a kernel asks for its precision, and what its epilogue does after
the loop, never change the mainloop a schedule lowers to. `@precision(tf32)` on the kernel gets
the TMA-fed warpgroup-MMA ring that a per-dot `precision = tf32` gets (the same KernelPlan
mainloop, wgmma and cp.async.bulk.tensor in the PTX, the same search families for the tuner),
and a bias, a ReLU or a 16-bit store after the loop leaves the mainloop as the plain matmul's."""

from __future__ import annotations

import pytest

from compiler.cuda import stages
from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import TF32_TMA_PROBE, Schedule
from compiler.cuda.tuning import autotune
from compiler.frontend import load as frontend
from compiler.frontend.binding import bind

DIMS = {"M": 8192, "N": 8192, "K": 8192}
TF32_POINT = {"TM": 128, "TN": 128, "TK": 32}  # the TMA TF32 ring's k (mainloops/tma_ws/tf32.py)
BF16_POINT = {"TM": 128, "TN": 256, "TK": 64}
BF16_TMA = Schedule(wgmma=True, stages=4, order="grouped", tma=True)

HEAD = "@autotune(TM in [64, 128], TN in [128, 256], TK in [32, 64])\n"
LOOP = """  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    {BODY}
  }
"""
LETS = """let a = A[ctx.block.x * TM :+ TM, kt :+ TK]
    let b = B[kt :+ TK, ctx.block.y * TN :+ TN]
    acc += dot(a, b{PRECISION})"""
INLINE = "acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN]{PRECISION})"
OUT = "C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN]"
EPILOGUES = {
    "plain": ("C: tensor<f32>[M, N]", f"  {OUT} = acc\n"),
    "bias_relu": ("bias: tensor<f32>[N], C: tensor<f32>[M, N]",
                  f"  {OUT} = max(acc + expand(bias[ctx.block.y * TN :+ TN], axis = 0), 0.0)\n"),
    "bias_relu_bf16": ("bias: tensor<f32>[N], C: tensor<bf16>[M, N]",
                       f"  {OUT} = bf16(max(acc + expand(bias[ctx.block.y * TN :+ TN], axis = 0), 0.0))\n"),
    "scale_f16": ("C: tensor<f16>[M, N], alpha: f32", f"  {OUT} = f16(alpha * acc)\n"),
}


def _kernel(operand: str, epilogue: str, *, kernel_tf32: bool = False, dot_tf32: bool = False,
            body: str = LETS):
    params, store = EPILOGUES[epilogue]
    text = ("@precision(tf32)\n" if kernel_tf32 else "") + HEAD
    text += f"kernel mm(A: tensor<{operand}>[M, K], B: tensor<{operand}>[K, N], {params}) {{\n"
    text += LOOP.replace("{BODY}", body.replace("{PRECISION}", ", precision = tf32" if dot_tf32 else ""))
    text += store + "}\n"
    return frontend.select_kernel(frontend.load_text(text), None)


def _lowered(kernel, point, schedule):
    """(the KernelPlan's mainloop, the generated CUDA) of `kernel` at `point` under `schedule`."""
    binding = bind(kernel, DIMS, None, point)
    leaf = stages.run(kernel, binding, stages.Options(False, schedule, 90), until="emit")
    return leaf.plan.mainloop, leaf.generated.source


def _features(kernel, point, schedule) -> set[str]:
    ptx = compile_kernel(kernel, bind(kernel, DIMS, None, point), schedule=schedule, cc=90).ptx
    names = ("wgmma.mma_async", "cp.async.bulk.tensor", "mma.sync", "cp.async.cg")
    return {n for n in names if n in ptx}


TF32_FORMS = {
    "per_dot": dict(dot_tf32=True),
    "kernel": dict(kernel_tf32=True),
    "kernel_inline": dict(kernel_tf32=True, body=INLINE),
    "per_dot_inline": dict(dot_tf32=True, body=INLINE),
}


@pytest.mark.parametrize("form", [f for f in TF32_FORMS if f != "per_dot"])
def test_kernel_precision_gets_the_per_dot_mainloop(form):
    reference = _kernel("f32", "plain", **TF32_FORMS["per_dot"])
    other = _kernel("f32", "plain", **TF32_FORMS[form])
    (ref_loop, _), (loop, _) = (_lowered(k, TF32_POINT, TF32_TMA_PROBE) for k in (reference, other))
    assert loop == ref_loop and loop.name == "tma_ws"
    assert autotune.search_families(other, False, 90) == autotune.search_families(reference, False, 90)
    assert _features(other, TF32_POINT, TF32_TMA_PROBE) == {"wgmma.mma_async", "cp.async.bulk.tensor"}


@pytest.mark.parametrize("epilogue", [e for e in EPILOGUES if e != "plain"])
@pytest.mark.parametrize("operand,point,schedule,forms", [
    ("f32", TF32_POINT, TF32_TMA_PROBE, dict(kernel_tf32=True)),
    ("bf16", BF16_POINT, BF16_TMA, {}),
])
def test_an_epilogue_leaves_the_mainloop_as_the_plain_matmuls(epilogue, operand, point, schedule, forms):
    plain = _kernel(operand, "plain", **forms)
    fused = _kernel(operand, epilogue, **forms)
    (plain_loop, _), (fused_loop, _) = (_lowered(k, point, schedule) for k in (plain, fused))
    assert fused_loop == plain_loop and fused_loop.name == "tma_ws"
    assert autotune.search_families(fused, False, 90) == autotune.search_families(plain, False, 90)
    assert {"wgmma.mma_async", "cp.async.bulk.tensor"} <= _features(fused, point, schedule)
