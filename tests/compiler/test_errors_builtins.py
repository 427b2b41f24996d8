"""Golden errors of the built-ins of issue 37 (the float functions, bit operations, scans, take,
the integer conversions and the reductions of integer tiles): each one's wrong dtype, and where
it takes an axis its wrong axis, fails at an exact `file:line:col` with a caret under the culprit
and a message that names it (docs/language.md §8). A test checks that every one of those
built-ins has its cases here."""

from __future__ import annotations

import pytest
from user_errors import assert_reported

from compiler.builtins import BUILTINS

ATTRS = "@autotune(B in [32, 64])"
PARAMS = ("a: tensor<i32>[N], l: tensor<i64>[N], u: tensor<u32>[N], f: tensor<bool>[N], x: tensor<f32>[N], "
          "m: tensor<f32>[N, N], e: tensor<e4m3>[N]")
I = "  let i = ctx.block.x * B\n"  # line 3; each case's own line is 4


def k(line: str) -> str:
    return f"{ATTRS}\nkernel k({PARAMS}) {{\n{I}{line}\n}}\n"


FLOAT_FUNCTIONS = ("tanh", "erf", "sigmoid", "rsqrt", "log1p", "expm1", "sin", "cos", "floor", "ceil")
BITS = ("bit_and", "bit_or", "bit_xor", "shift_left", "shift_right")
SCANS = ("cumsum", "cumprod", "cummax", "cummin")
INTS = "needs integer operands (i32, i64, u32), found"
TAKE = "take's indices must be a rank-1 tile of i32, i64 or u32"
BOOL = "load(f[i :+ B])"  # columns 4:N of the cases below are computed from where it sits


def _at(line: str, needle: str) -> str:
    return f"4:{line.index(needle) + 1}"


def _case(name: str, line: str, culprit: str, message: str):
    return (name, k(line), _at(line, culprit), message)


def _float_cases():
    for f in FLOAT_FUNCTIONS:
        line = f"  x[i :+ B] = {f}({BOOL})"
        yield _case(f"{f}_of_bool", line, BOOL, f"{f} needs numbers, found tile<bool>[B]")
        line = f"  x[i :+ B] = {f}(load(e[i :+ B]))"
        yield _case(f"{f}_of_fp8", line, "load(e", f"{f}() cannot take tile<e4m3>[B]: an fp8 value is only")
        line = f"  x[i :+ B] = {f}(load(x[i :+ B]), axis = 0)"
        yield _case(f"{f}_with_axis", line, "0)", f"{f} has no keyword argument 'axis' (known: none)")
    line = f"  x[i :+ B] = pow(load(x[i :+ B]), {BOOL})"
    yield _case("pow_of_bool", line, BOOL, "pow needs numbers, found tile<bool>[B]")
    line = "  x[i :+ B] = pow(load(x[i :+ B]), load(m[i :+ B, 0 :+ B]))"
    yield _case("pow_of_two_ranks", line, "load(m",
                "shape mismatch: tile<f32>[B] and tile<f32>[B, B] have different ranks")
    yield _case("pow_of_one", "  x[i :+ B] = pow(load(x[i :+ B]))", "pow", "pow takes 2 arguments, found 1")


def _bit_cases():
    for f in BITS:
        line = f"  a[i :+ B] = {f}(load(a[i :+ B]), load(x[i :+ B]))"
        yield _case(f"{f}_of_float", line, "load(x", f"{f} {INTS} tile<f32>[B]")
        line = f"  l[i :+ B] = {f}(load(l[i :+ B]), load(u[i :+ B]))"
        yield _case(f"{f}_of_two_types", line, "load(u",
                    f"{f} needs operands of one integer type, found tile<i64>[B] and tile<u32>[B]")
    line = f"  a[i :+ B] = bit_not({BOOL})"
    yield _case("bit_not_of_bool", line, BOOL, f"bit_not {INTS} tile<bool>[B]")
    line = "  a[i :+ B] = bit_not(load(x[i :+ B]))"
    yield _case("bit_not_of_float", line, "load(x", f"bit_not {INTS} tile<f32>[B]")


def _scan_cases():
    for f in SCANS:
        line = f"  a[i :+ B] = {f}({BOOL}, axis = 0)"
        yield _case(f"{f}_of_bool", line, BOOL, f"{f} needs numbers, found tile<bool>[B]")
        line = f"  x[i :+ B] = {f}(load(e[i :+ B]), axis = 0)"
        yield _case(f"{f}_of_fp8", line, "load(e", f"{f}() cannot take tile<e4m3>[B]")
        line = f"  x[i :+ B] = {f}(load(x[i :+ B]), axis = 1)"
        yield _case(f"{f}_axis_out_of_range", line, "1)",
                    f"axis 1 is out of range 0..0 for {f} of tile<f32>[B]")
        line = f"  m[i :+ B, 0 :+ B] = {f}(load(m[i :+ B, 0 :+ B]), axis = -1)"
        yield _case(f"{f}_negative_axis", line, "-1)",
                    f"axis -1 is out of range 0..1 for {f} of tile<f32>[B, B]")
        line = f"  x[i :+ B] = {f}(load(x[i :+ B]))"
        yield _case(f"{f}_without_axis", line, f"{f}(", f"{f} needs 'axis = k'")
        line = f"  x[i] = {f}(load(x[i]), axis = 0)"
        yield _case(f"{f}_of_a_scalar", line, "load(x[i])", f"{f}(x, axis = k) needs a tile, found f32")
        line = f"  x[i :+ B] = {f}(load(x[i :+ B]), axis = B)"
        yield _case(f"{f}_axis_not_literal", line, "B)", "axis must be an integer literal")


def _other_cases():
    line = "  x[i :+ B] = take(load(x[0 :+ B]), load(m[0 :+ B, 0 :+ B]), axis = 0)"
    yield _case("take_rank2_indices", line, "load(m", TAKE)
    line = f"  x[i :+ B] = take(load(x[0 :+ B]), {BOOL}, axis = 0)"
    yield _case("take_bool_indices", line, BOOL, f"{TAKE}, found tile<bool>[B]")
    line = "  x[i :+ B] = take(load(x[0 :+ B]), load(a[i :+ B]))"
    yield _case("take_without_axis", line, "take(", "take needs 'axis = k'")
    line = "  x[i :+ B] = take(2.0, load(a[i :+ B]), axis = 0)"
    yield _case("take_of_a_scalar", line, "2.0", "take needs a tile, found f32")
    for f in ("i64", "u32"):
        line = f"  l[i :+ B] = {f}(load(x[i :+ B]), 2)"
        yield _case(f"{f}_of_two", line, f"{f}(", f"{f} takes 1 argument, found 2")
    for f in ("sum", "max", "min"):
        line = f"  x[i] = {f}({BOOL}, axis = 0)"
        yield _case(f"{f}_of_bool", line, BOOL, f"{f} needs numbers, found tile<bool>[B]")
        line = f"  l[i] = {f}(load(l[i :+ B]), axis = 1)"
        yield _case(f"{f}_of_i64_axis", line, "1)", f"axis 1 is out of range 0..0 for {f} of tile<i64>[B]")
        line = f"  a[i] = {f}(load(u[i :+ B]), axis = 0)"
        yield _case(f"{f}_of_u32_into_i32", line, f"{f}(", "tensor 'a' holds i32; cannot store u32")


CASES = [*_float_cases(), *_bit_cases(), *_scan_cases(), *_other_cases()]


@pytest.mark.parametrize(("source", "where", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(source, where, message):
    assert_reported(source, where, message)


def test_every_new_builtin_has_its_errors():
    new = set(FLOAT_FUNCTIONS + BITS + SCANS) | {"pow", "bit_not", "take", "i64", "u32", "sum", "max", "min"}
    assert new <= set(BUILTINS)
    missing = [f for f in sorted(new) if not any(c[0].startswith(f + "_") for c in CASES)]
    assert not missing
    for f in SCANS + ("take",):  # the axis takers: a wrong axis each
        assert any(c[0].startswith(f + "_") and "axis" in c[0] for c in CASES), f
    assert len({c[0] for c in CASES}) == len(CASES)
