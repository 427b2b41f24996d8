"""Golden errors of the integer and bool dtypes, take's indices and the atomics (issue 37 items 3
and 4): each bad kernel fails at an exact `file:line:col` with a caret under it and a message that
says what is wrong (docs/language.md §4.3, §6.4, §8)."""

from __future__ import annotations

import pytest
from user_errors import assert_reported

from compiler.frontend.load import load_text

ATTRS = "@autotune(B in [32, 64])"
INTS = ("a: tensor<i32>[N], u: tensor<u32>[N], l: tensor<i64>[N], c: tensor<u8>[N], "
        "f: tensor<bool>[N], x: tensor<f32>[N], h: tensor<bf16>[N]")


def k(body: str, params: str = INTS) -> str:
    """A kernel whose body starts on line 3 (line 1: attributes, line 2: the header)."""
    return f"{ATTRS}\nkernel k({params}) {{\n{body}\n}}\n"


I = "  let i = ctx.block.x * B\n"  # line 3; the case's own line is 4

CASES = [
    ("mixed_signed_unsigned", k(I + "  a[i :+ B] = load(a[i :+ B]) + load(u[i :+ B])"), "4:33",
     "mixed signed and unsigned integers (i32 and u32)"),
    ("compare_signed_unsigned", k(I + "  f[i :+ B] = load(a[i :+ B]) < load(u[i :+ B])"), "4:33",
     "mixed signed and unsigned integers"),
    ("literal_too_big_for_u32", k(I + "  u[i :+ B] = load(u[i :+ B]) + -1"), "4:33",
     "the literal -1 does not fit in u32"),
    ("float_into_i64", k(I + "  l[i :+ B] = load(x[i :+ B])"), "4:15",
     "tensor 'l' holds i64; cannot store tile<f32>[B] without a conversion i64(...)"),
    ("i64_into_i32", k(I + "  a[i :+ B] = load(l[i :+ B])"), "4:15",
     "cannot store tile<i64>[B] without a conversion i32(...)"),
    ("i32_into_u32", k(I + "  u[i :+ B] = load(a[i :+ B])"), "4:15",
     "tensor 'u' holds u32; cannot store tile<i32>[B] without a conversion u32(...)"),
    ("float_into_u8", k(I + "  c[i :+ B] = load(x[i :+ B])"), "4:15",
     "tensor 'c' holds u8; cannot store tile<f32>[B] without a conversion i32(...)"),
    ("number_into_bool", k(I + "  f[i :+ B] = load(a[i :+ B])"), "4:15",
     "tensor 'f' holds bool; cannot store tile<i32>[B]"),
    ("bool_into_i32", k(I + "  a[i :+ B] = load(f[i :+ B])"), "4:15",
     "tensor 'a' holds i32; cannot store tile<bool>[B]"),
    ("compound_bool_store", k(I + "  f[i :+ B] += load(f[i :+ B])"), "4:16", "'+=' needs numbers"),
    ("var_u32_from_i32", k("  var n: u32 = 0\n  n = ctx.block.x"), "4:7",
     "var 'n' is u32; cannot assign i32 without a conversion u32(...)"),
    ("bool_fill_of_int", k(I + "  a[i :+ B] = load(a[i :+ B], fill = true)"), "4:38",
     "fill must be a number"),
    ("float_fill_of_int", k(I + "  a[i :+ B] = load(a[i :+ B], fill = 0.5)"), "4:38",
     "fill of tensor 'a' (i32) must be an integer, found f32"),
    ("bits_of_float", k(I + "  a[i :+ B] = bit_and(load(x[i :+ B]), 3)"), "4:23",
     "bit_and needs integer operands (i32, i64, u32), found tile<f32>[B]"),
    ("bits_of_two_types", k(I + "  l[i :+ B] = bit_or(load(l[i :+ B]), load(a[i :+ B]))"), "4:39",
     "bit_or needs operands of one integer type, found tile<i64>[B] and tile<i32>[B]"),
    ("take_float_indices", k(I + "  x[i :+ B] = take(load(x[0 :+ B]), load(x[i :+ B]), axis = 0)"), "4:37",
     "take's indices must be a rank-1 tile of i32, i64 or u32, found tile<f32>[B]"),
    ("take_bad_axis", k(I + "  x[i :+ B] = take(load(x[0 :+ B]), load(l[i :+ B]), axis = 1)"), "4:61",
     "axis 1 is out of range 0..0 for take"),
    ("u8_scalar_param", "kernel k(s: u8) {\n}\n", "1:13", "expected 'tensor<...>[...]' or a scalar type"),
    ("u8_var", k("  var n: u8 = 0"), "3:10", "expected a type"),
    # ---- atomics ----
    ("atomic_into_bf16", k(I + "  atomic_add(h[i :+ B], load(x[i :+ B]))"), "4:14",
     "atomic_add needs a tensor of f32, i32, i64, u32; 'h' holds bf16"),
    ("atomic_float_into_int", k(I + "  atomic_max(a[i :+ B], load(x[i :+ B]))"), "4:25",
     "tensor 'a' holds i32; cannot atomic_max tile<f32>[B] without a conversion i32(...)"),
    ("atomic_bool_value", k(I + "  atomic_add(x[i :+ B], load(f[i :+ B]))"), "4:25",
     "atomic_add needs numbers"),
    ("atomic_target_read", k(I + "  atomic_add(x[0 :+ B], 1.0)\n  a[i :+ B] = i32(load(x[i :+ B]))"), "5:19",
     "'x' is the target of atomic_add at line 4; reading it in the same kernel"),
    ("atomic_and_store", k(I + "  atomic_add(x[0 :+ B], 1.0)\n  x[i :+ B] = 2.0"), "5:3",
     "'x' is the target of atomic_add at line 4; a store ('=') into it in the same kernel would race"),
    ("atomic_add_and_max", k(I + "  atomic_add(x[0 :+ B], 1.0)\n  atomic_max(x[0 :+ B], 1.0)"), "5:3",
     "atomic_max into it in the same kernel would race"),
    ("atomic_not_a_tensor", k(I + "  atomic_add(i, 1)"), "4:15", "expected '[' and a slice of 'i'"),
    ("atomic_unknown_tensor", k(I + "  atomic_add(q[i :+ B], 1.0)"), "4:14", "unknown tensor 'q'"),
]


@pytest.mark.parametrize(("source", "where", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(source, where, message):
    assert_reported(source, where, message)


def test_the_right_kernels_pass():
    """What the rules allow: i32 into i64 (widening), literals adopting u32/i64, any integer into
    u8, integers into floats, bools into bools, take with i64 and u32 indices, atomics of every
    supported dtype."""
    load_text(k(I + "\n".join([
        "  let n = load(a[i :+ B])",
        "  l[i :+ B] = n + load(l[i :+ B])",
        "  u[i :+ B] = load(u[i :+ B]) * 3 + 4000000000",
        "  c[i :+ B] = load(l[i :+ B])",
        "  x[i :+ B] = load(u[i :+ B])",
        "  f[i :+ B] = load(f[i :+ B], fill = false) or n > 0",
        "  let g = take(load(x[0 :+ B]), load(l[i :+ B]), axis = 0)",
        "  let g2 = take(load(x[0 :+ B]), load(u[i :+ B]), axis = 0)",
    ])), "ok.phk")
    load_text(k(I + "\n".join([
        "  atomic_add(x[0 :+ B], 1.0)", "  atomic_max(a[0 :+ B], 3)",
        "  atomic_min(l[0 :+ B], load(c[i :+ B]))", "  atomic_add(u[0], 7)",
    ])), "ok.phk")


def test_case_count():
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)
