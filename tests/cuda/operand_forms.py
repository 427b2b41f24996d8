"""Matmuls whose dot operands take every form a kernel can give them, in every operand type: a
slice, the transpose of a slice (the tensor stored the other way round), a let of either, and a
tile computed in registers (scaled by 2, exactly, and cast back) or its transpose; a and b
independently, in bf16, f16, TF32 (@precision(tf32)) and exact f32. Each kernel computes
C = opA(A) opB(B), so numpy's formula is the same for all of them."""

from __future__ import annotations

import itertools

import numpy as np
from novel_cases import families, first_generating, tf32

from compiler.frontend import ir

FORMS = ("load", "tload", "let", "tlet", "reg", "treg")
TYPES = ("bf16", "f16", "tf32", "f32")
DIMS = {"M": 200, "N": 136, "K": 104}
SLICES = ("load", "tload", "let", "tlet")


def _operand(role: str, form: str, dtype: str) -> tuple[str, str]:
    """(let statement or "", the dot argument) of operand `role` in `form`."""
    plain, flipped = ("A", "At") if role == "a" else ("B", "Bt")
    index = "pm :+ TM, kt :+ TK" if role == "a" else "kt :+ TK, pn :+ TN"
    flipped_index = "kt :+ TK, pm :+ TM" if role == "a" else "pn :+ TN, kt :+ TK"
    load, flipped_load = f"{plain}[{index}]", f"{flipped}[{flipped_index}]"
    name = "x" if role == "a" else "y"

    def doubled(x: str) -> str:
        return f"{dtype}(f32({x}) * 2.0)" if dtype in ("bf16", "f16") else f"{x} * 2.0"

    return {
        "load": ("", load),
        "tload": ("", f"transpose({flipped_load})"),
        "let": (f"    let {name} = {load}\n", name),
        "tlet": (f"    let {name} = {flipped_load}\n", f"transpose({name})"),
        "reg": ("", doubled(load)),
        "treg": ("", f"transpose({doubled(flipped_load)})"),
    }[form]


def kernel_text(dtype: str, form_a: str, form_b: str) -> str:
    storage = "f32" if dtype in ("tf32", "f32") else dtype
    let_a, a = _operand("a", form_a, dtype)
    let_b, b = _operand("b", form_b, dtype)
    shapes = (("A", "M, K"), ("At", "K, M"), ("B", "K, N"), ("Bt", "N, K"))
    tensors = ", ".join(f"{n}: tensor<{storage}>[{d}]" for n, d in shapes)
    return f"""{"@precision(tf32)" if dtype == "tf32" else ""}
@autotune(TM in [64, 128], TN in [64], TK in [16, 32])
kernel forms({tensors}, C: tensor<f32>[M, N]) {{
  let pm = ctx.block.x * TM
  let pn = ctx.block.y * TN
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {{
{let_a}{let_b}    acc += dot({a}, {b})
  }}
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}}
"""


def cases() -> list[tuple[str, str, str]]:
    return list(itertools.product(TYPES, FORMS, FORMS))


def consistent(arrays: dict) -> None:
    """At and Bt hold the transposes of A and B, so that every form reads the same matrices."""
    arrays["At"][...] = arrays["A"].T
    arrays["Bt"][...] = arrays["B"].T


def reference(arrays: dict, dtype: str, form_a: str, form_b: str) -> np.ndarray:
    def operand(x, form):
        x = x.astype(np.float64)
        return (tf32(x) if dtype == "tf32" else x) * (2.0 if form in ("reg", "treg") else 1.0)

    return operand(arrays["A"], form_a) @ operand(arrays["B"], form_b)


def dropped_sm90(dtype: str, form_a: str, form_b: str) -> int:
    """How many schedule families prune this form at every tile point on sm_90: for 16-bit
    operands, warpgroup MMA under a = treg with b a slice (no point lays its tiles out); for TF32,
    the TMA ring's role swap (C^T = B^T A^T, a k-contiguous and b n-contiguous) under a
    transposed slice of either with the other a slice. On sm_80 (one family) none is dropped."""
    if dtype in ("bf16", "f16"):
        return int(form_a == "treg" and form_b in SLICES)
    transposed = form_a in ("tload", "tlet") or form_b in ("tload", "tlet")
    return int(dtype == "tf32" and form_a in SLICES and form_b in SLICES and transposed)


def probe_pairs(kernel: ir.Kernel, turn: int, cc: int) -> list:
    """(tile point, probe) for each schedule family whose probe gives CUDA C++ for `cc` at some
    point: the first such point taken in turn from the (turn + family)-th, so that the forms
    together visit every point."""
    pairs = []
    for f, fam in enumerate(families(kernel, cc)):
        point = first_generating(kernel, DIMS, turn + f, fam[0], cc)
        pairs += [] if point is None else [(point, fam[0])]
    return pairs
