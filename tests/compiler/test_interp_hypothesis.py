"""Random kernels, written as source text, against the same expression evaluated by numpy.

Hypothesis draws an expression tree over three loaded tiles, a scalar and constants (+, -, *, /,
max, min, exp, abs, where over comparisons and and/or/not), random tile sizes and ragged
dimensions. The tree is rendered twice: as phobos source, run through the front-end and the
interpreter, and as numpy on the whole arrays.

Elementwise f32 operations are evaluated in the same order on the same float32 values on both
sides, so the results must be bit-identical (nan where nan). Sums are compared with the f32
summation bound of test_interp_examples (different tile sizes change the order of additions).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.frontend.binding import bind
from compiler.frontend.load import load_text
from compiler.interp.interpreter import run_kernel

EPS32 = 2.0**-24
LEAVES = ("a", "b", "d", "s")


def _leaf():
    consts = st.sampled_from([0.5, 2.0, -1.25, 0.0, 3.0])
    return st.one_of(st.sampled_from(LEAVES).map(lambda n: ("leaf", n)), consts.map(lambda v: ("const", v)))


def _extend(children):
    unary = st.tuples(st.sampled_from(["neg", "abs", "exp"]), children)
    binary = st.tuples(st.sampled_from(["+", "-", "*", "/", "max", "min"]), children, children)
    compare = st.tuples(st.sampled_from(["<", ">=", "==", "!="]), children, children)
    cond = st.one_of(
        compare,
        st.tuples(st.sampled_from(["and", "or"]), compare, compare),
        st.tuples(st.just("not"), compare),
    )
    select = st.tuples(st.just("where"), cond, children, children)
    return st.one_of(unary, binary, select)


EXPRS = st.recursive(_leaf(), _extend, max_leaves=8)


def to_source(node) -> str:
    kind = node[0]
    if kind == "leaf":
        return node[1]
    if kind == "const":
        return repr(float(node[1]))
    if kind == "neg":
        return f"(-{to_source(node[1])})"
    if kind == "abs":
        return f"abs({to_source(node[1])})"
    if kind == "exp":
        # keep exp finite so that sums of its results stay comparable
        return f"exp(min({to_source(node[1])}, 4.0))"
    if kind in ("max", "min"):
        return f"{kind}({to_source(node[1])}, {to_source(node[2])})"
    if kind == "not":
        return f"(not {to_source(node[1])})"
    if kind == "where":
        return f"where({to_source(node[1])}, {to_source(node[2])}, {to_source(node[3])})"
    return f"({to_source(node[1])} {kind} {to_source(node[2])})"


def to_numpy(node, env):
    kind = node[0]
    if kind == "leaf":
        return env[node[1]]
    if kind == "const":
        return np.float32(node[1])
    args = [to_numpy(n, env) for n in node[1:]]
    ops = {
        "neg": lambda x: -x, "abs": np.abs, "exp": lambda x: np.exp(np.fmin(x, np.float32(4.0))),
        "max": np.fmax, "min": np.fmin, "+": np.add, "-": np.subtract, "*": np.multiply,
        "/": np.true_divide, "<": np.less, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal,
        "and": np.logical_and, "or": np.logical_or, "not": np.logical_not, "where": np.where,
    }
    return ops[kind](*args)


def _inputs(data, r, c):
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    # Small integers and halves make equality tests and where() branches actually fire.
    arrays = {n: (rng.integers(-4, 5, (r, c)) * 0.5).astype(np.float32) for n in "abd"}
    return arrays, np.float32(data.draw(st.sampled_from([0.5, -2.0, 1.5])))


INPUTS = "x: tensor<f32>[R, C], y: tensor<f32>[R, C], z: tensor<f32>[R, C]"
TILES = st.sampled_from([1, 2, 4, 8, 16, 32])
SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(expr=EXPRS, r=st.integers(1, 40), c=st.integers(1, 40), br=TILES, bc=TILES, data=st.data())
def test_random_elementwise_kernels_match_numpy(expr, r, c, br, bc, data):
    src = f"""
@autotune(BR in [{br}], BC in [{bc}])
kernel k({INPUTS}, out: tensor<f32>[R, C], s: f32) {{
  let i = ctx.block.x * BR
  let j = ctx.block.y * BC
  let a = x[i :+ BR, j :+ BC]
  let b = y[i :+ BR, j :+ BC]
  let d = z[i :+ BR, j :+ BC]
  out[i :+ BR, j :+ BC] = full([BR, BC], 0.0) + {to_source(expr)}
}}
"""
    arrays, s = _inputs(data, r, c)
    kernel = load_text(src).kernel()
    out = np.full((r, c), 12345.0, np.float32)
    tensors = {"x": arrays["a"], "y": arrays["b"], "z": arrays["d"], "out": out}
    run_kernel(kernel, bind(kernel, {"R": r, "C": c}), tensors, {"s": float(s)})
    with np.errstate(all="ignore"):
        expected = np.float32(0.0) + to_numpy(expr, {**arrays, "s": s}) + np.zeros((r, c), np.float32)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


@SETTINGS
@given(expr=EXPRS, r=st.integers(1, 40), c=st.integers(1, 40), tile=TILES,
       func=st.sampled_from(["sum", "max", "min"]), axis=st.sampled_from([0, 1]),
       inner=st.booleans(), data=st.data())
def test_random_reductions_match_numpy(expr, r, c, tile, func, axis, inner, data):
    """Reduce along a whole tensor axis (loaded with `:`) while the grid tiles the other axis,
    optionally subtracting a broadcast inner reduction first (explicit expand)."""
    shape = "T, C" if axis == 1 else "R, T"
    body = f"(full([{shape}], 0.0) + {to_source(expr)})"
    if inner:
        body = f"({body}) - expand(max({body}, axis = {axis}), axis = {axis})"
    if axis == 1:
        index, out_dim = "i :+ T, :", "R"
    else:
        index, out_dim = ":, i :+ T", "C"
    src = f"""
@autotune(T in [{tile}])
kernel k({INPUTS}, out: tensor<f32>[{out_dim}], s: f32) {{
  let i = ctx.block.x * T
  let a = x[{index}]
  let b = y[{index}]
  let d = z[{index}]
  out[i :+ T] = {func}({body}, axis = {axis})
}}
"""
    arrays, s = _inputs(data, r, c)
    kernel = load_text(src).kernel()
    out = np.full(r if axis == 1 else c, 12345.0, np.float32)
    tensors = {"x": arrays["a"], "y": arrays["b"], "z": arrays["d"], "out": out}
    run_kernel(kernel, bind(kernel, {"R": r, "C": c}), tensors, {"s": float(s)})
    with np.errstate(all="ignore"):
        value = np.float32(0.0) + to_numpy(expr, {**arrays, "s": s}) + np.zeros((r, c), np.float32)
        if inner:  # float max/min fold as fmaxf/fminf from -inf/+inf: NaN elements count as nothing
            value = value - np.max(np.where(np.isnan(value), -np.inf, value), axis=axis, keepdims=True)
        if func != "sum":
            value = np.where(np.isnan(value), -np.inf if func == "max" else np.inf, value)
        expected = {"sum": np.sum, "max": np.max, "min": np.min}[func](value, axis=axis)
    if func != "sum":
        np.testing.assert_array_equal(out, expected)
        return
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(out), finite)
    np.testing.assert_array_equal(out[~finite], expected[~finite])
    magnitude = np.abs(np.where(np.isfinite(value), value, 0)).astype(np.float64).sum(axis=axis)
    bound = 8 * np.sqrt(value.shape[axis]) * EPS32 * magnitude
    assert np.all(np.abs(out[finite].astype(np.float64) - expected[finite]) <= bound[finite])


def _int_leaf():
    return st.one_of(st.sampled_from(LEAVES).map(lambda n: ("leaf", n)),
                     st.sampled_from([0, 1, 2, -3]).map(lambda v: ("iconst", v)))


def _int_extend(children):
    unary = st.tuples(st.sampled_from(["neg", "abs"]), children)
    binary = st.tuples(st.sampled_from(["+", "-", "*", "/", "%", "max", "min"]), children, children)
    compare = st.tuples(st.sampled_from(["<", ">=", "==", "!="]), children, children)
    return st.one_of(unary, binary, st.tuples(st.just("where"), compare, children, children))


INT_EXPRS = st.recursive(_int_leaf(), _int_extend, max_leaves=8)


def int_source(node) -> str:
    if node[0] == "iconst":
        return str(node[1])
    if node[0] == "leaf":
        return node[1]
    if node[0] in ("neg", "abs"):
        return f"(-{int_source(node[1])})" if node[0] == "neg" else f"abs({int_source(node[1])})"
    if node[0] in ("max", "min"):
        return f"{node[0]}({int_source(node[1])}, {int_source(node[2])})"
    if node[0] == "where":
        return f"where({int_source(node[1])}, {int_source(node[2])}, {int_source(node[3])})"
    return f"({int_source(node[1])} {node[0]} {int_source(node[2])})"


def int_numpy(node, env):
    """i32 meaning: `/` floors, `%` takes the divisor's sign (numpy's // and %)."""
    if node[0] == "iconst":
        return np.int32(node[1])
    if node[0] == "leaf":
        return env[node[1]]
    args = [int_numpy(n, env) for n in node[1:]]
    ops = {"neg": np.negative, "abs": np.abs, "max": np.maximum, "min": np.minimum, "+": np.add,
           "-": np.subtract, "*": np.multiply, "/": np.floor_divide, "%": np.mod, "<": np.less,
           ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal, "where": np.where}
    return ops[node[0]](*args)


@SETTINGS
@given(expr=INT_EXPRS, r=st.integers(1, 30), c=st.integers(1, 30), br=TILES, bc=TILES, data=st.data())
def test_random_i32_kernels_match_numpy(expr, r, c, br, bc, data):
    src = f"""
@autotune(BR in [{br}], BC in [{bc}])
kernel k(x: tensor<i32>[R, C], y: tensor<i32>[R, C], z: tensor<i32>[R, C], out: tensor<i32>[R, C], s: i32) {{
  let i = ctx.block.x * BR
  let j = ctx.block.y * BC
  let a = x[i :+ BR, j :+ BC]
  let b = y[i :+ BR, j :+ BC]
  let d = z[i :+ BR, j :+ BC]
  out[i :+ BR, j :+ BC] = i32(full([BR, BC], 0.0)) + {int_source(expr)}
}}
"""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    arrays = {n: rng.integers(-4, 5, (r, c)).astype(np.int32) for n in "abd"}
    s = data.draw(st.sampled_from([-2, 3]))
    kernel = load_text(src).kernel()
    out = np.full((r, c), 12345, np.int32)
    tensors = {"x": arrays["a"], "y": arrays["b"], "z": arrays["d"], "out": out}
    run_kernel(kernel, bind(kernel, {"R": r, "C": c}), tensors, {"s": s})
    with np.errstate(all="ignore"):  # x / 0 and x % 0 are 0 in numpy; undefined on a GPU
        expected = int_numpy(expr, {**arrays, "s": np.int32(s)}) + np.zeros((r, c), np.int32)
    np.testing.assert_array_equal(out, expected.astype(np.int32))


@SETTINGS
@given(expr=EXPRS, r=st.integers(1, 30), c=st.integers(1, 70), br=TILES, bc=TILES, data=st.data())
def test_random_loop_reductions_match_numpy(expr, r, c, br, bc, data):
    """Row sums accumulated in a var over a ragged loop of column blocks, the padding masked
    with where(); and a running max over the same blocks read with fill = -inf."""
    body = f"(full([BR, BC], 0.0) + {to_source(expr)})"
    src = f"""
@autotune(BR in [{br}], BC in [{bc}])
kernel k({INPUTS}, total: tensor<f32>[R], top: tensor<f32>[R], s: f32) {{
  let i = ctx.block.x * BR
  var acc: tile<f32>[BR] = 0.0
  var m: tile<f32>[BR] = -inf
  for j in range(0, C, BC) {{
    let a = x[i :+ BR, j :+ BC]
    let b = y[i :+ BR, j :+ BC]
    let d = z[i :+ BR, j :+ BC]
    let in_range = expand(j + arange(BC) < C, axis = 0)
    acc += sum(where(in_range, {body}, 0.0), axis = 1)
    m = max(m, max(load(x[i :+ BR, j :+ BC], fill = -inf), axis = 1))
  }}
  total[i :+ BR] = acc
  top[i :+ BR] = m
}}
"""
    arrays, s = _inputs(data, r, c)
    kernel = load_text(src).kernel()
    total, top = np.zeros(r, np.float32), np.zeros(r, np.float32)
    tensors = {"x": arrays["a"], "y": arrays["b"], "z": arrays["d"], "total": total, "top": top}
    run_kernel(kernel, bind(kernel, {"R": r, "C": c}), tensors, {"s": float(s)})
    np.testing.assert_array_equal(top, arrays["a"].max(axis=1))
    with np.errstate(all="ignore"):
        value = np.float32(0.0) + to_numpy(expr, {**arrays, "s": s}) + np.zeros((r, c), np.float32)
    expected = value.sum(axis=1)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(total), finite)
    np.testing.assert_array_equal(total[~finite], expected[~finite])
    magnitude = np.abs(np.where(np.isfinite(value), value, 0)).astype(np.float64).sum(axis=1)
    bound = 8 * np.sqrt(c) * EPS32 * magnitude
    assert np.all(np.abs(total[finite].astype(np.float64) - expected[finite]) <= bound[finite])
