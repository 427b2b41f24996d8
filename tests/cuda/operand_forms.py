"""Matmuls whose dot operands take every form a kernel can give them, in every operand type: a
slice, the transpose of a slice (the tensor stored the other way round), a let of either, and a
tile computed in registers (scaled by 2, exactly, and cast back) or its transpose; a and b
independently, in bf16, f16, TF32 (@precision(tf32)) and exact f32. Each kernel computes
C = opA(A) opB(B), so numpy's formula is the same for all of them."""

from __future__ import annotations

import itertools

import numpy as np
from novel_cases import tf32

FORMS = ("load", "tload", "let", "tlet", "reg", "treg")
TYPES = ("bf16", "f16", "tf32", "f32")
DIMS = {"M": 200, "N": 136, "K": 104}


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
