"""Kernels that use the built-ins added through the one built-in table (compiler/builtins.py):
the float functions, the scans, take and the bit operations, with the numpy meaning of each, shared
by the CPU test (interpreter against numpy, NVRTC) and the GPU test (GPU against the interpreter)."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend import load as frontend

FUNCTIONS = """\
@precision(math = {math})
@autotune(BR in [4, 16], BC in [64, 256])
kernel functions(x: tensor<f32>[R, C], p: tensor<f32>[R, C], y: tensor<f32>[9, R, C]) {{
  let r = ctx.block.x * BR
  let c = ctx.block.y * BC
  let t = load(x[r :+ BR, c :+ BC], fill = 0.0)
  let q = load(p[r :+ BR, c :+ BC], fill = 1.0)
  y[0, r :+ BR, c :+ BC] = tanh(t)
  y[1, r :+ BR, c :+ BC] = erf(t)
  y[2, r :+ BR, c :+ BC] = sigmoid(t)
  y[3, r :+ BR, c :+ BC] = rsqrt(q)
  y[4, r :+ BR, c :+ BC] = log1p(q) + expm1(t)
  y[5, r :+ BR, c :+ BC] = sin(t) + cos(t)
  y[6, r :+ BR, c :+ BC] = pow(q, t)
  y[7, r :+ BR, c :+ BC] = floor(t * 4.0)
  y[8, r :+ BR, c :+ BC] = ceil(t * 4.0)
}}
"""

SCANS = """\
@autotune(BR in [2, 8], BC in [128, 512])
kernel scans(x: tensor<f32>[R, C], s: tensor<f32>[R, C], m: tensor<f32>[R, C], v: tensor<f32>[R, C],
             pr: tensor<f32>[R, C]) {
  let r = ctx.block.x * BR
  let t = load(x[r :+ BR, 0 :+ BC], fill = 0.0)
  s[r :+ BR, 0 :+ BC] = cumsum(t, axis = 1)
  m[r :+ BR, 0 :+ BC] = cummax(t, axis = 1)
  v[r :+ BR, 0 :+ BC] = cumsum(t, axis = 0)
  pr[r :+ BR, 0 :+ BC] = cumprod(1.0 + t * 0.01, axis = 1)
}
"""

GATHER = """\
@autotune(BM in [8, 32], BD in [32, 128])
kernel gather(E: tensor<f32>[V, D], ids: tensor<i32>[M], out: tensor<f32>[M, D]) {
  let m = ctx.block.x * BM
  let d = ctx.block.y * BD
  let idx = load(ids[m :+ BM], fill = 0)
  out[m :+ BM, d :+ BD] = take(E[:, d :+ BD], idx, axis = 0)
}
"""

BITS = """\
@autotune(B in [128, 1024])
kernel bits(a: tensor<i32>[N], b: tensor<i32>[N], y: tensor<i32>[5, N]) {
  let i = ctx.block.x * B
  let u = load(a[i :+ B], fill = 0)
  let w = load(b[i :+ B], fill = 0)
  y[0, i :+ B] = bit_and(u, w)
  y[1, i :+ B] = bit_or(u, w)
  y[2, i :+ B] = bit_xor(u, w)
  y[3, i :+ B] = shift_left(u, w % 40)
  y[4, i :+ B] = shift_right(u, w % 40)
}
"""


def kernel(text: str, name: str):
    return frontend.load_text(text, f"{name}.phk").kernel()


def function_inputs(rng, rows: int, cols: int) -> dict[str, np.ndarray]:
    x = (rng.standard_normal((rows, cols)) * 2).astype(np.float32)
    p = rng.uniform(0.1, 4.0, (rows, cols)).astype(np.float32)
    return {"x": x, "p": p, "y": np.full((9, rows, cols), np.nan, np.float32)}


def function_meaning(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Each function in float64 of the f32 arguments, as the interpreter defines them."""
    t, q = x.astype(np.float64), p.astype(np.float64)
    erf = np.vectorize(math.erf)(t)
    out = [np.tanh(t), erf, 1 / (1 + np.exp(-t)), 1 / np.sqrt(q), np.log1p(q) + np.expm1(t),
           np.sin(t) + np.cos(t), q**t, np.floor(t * 4), np.ceil(t * 4)]
    return np.stack(out)


# docs/language.md §8.2, math = accurate: each output's terms as (function, its ulp bound on the
# GPU); a sum of two terms is rounded once more on each side
ACCURATE_TERMS = (
    (("tanh", 1),), (("erf", 2),), (("sigmoid", 1),), (("rsqrt", 1),),
    (("log1p", 1), ("expm1", 1)), (("sin", 1), ("cos", 1)), (("pow", 1),), (("floor", 0),), (("ceil", 0),),
)
FTZ = 2.0**-126  # the GPU flushes subnormal f32 results to zero: at most this, absolute


def accurate_bound(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per element, the most |GPU - interpreter| may be under §8.2's accurate bounds: the GPU is
    within b ulp of each exact term and the interpreter within 0.5 ulp (it rounds the exact value
    once), so a term differs by at most (b + 0.5) ulp of the term; a sum adds both sides' rounding
    of the sum, 0.5 ulp each; exact terms (floor, ceil) add nothing. Plus FTZ per term."""
    t, q = x.astype(np.float64), p.astype(np.float64)
    value = {"tanh": np.tanh(t), "erf": np.vectorize(math.erf)(t), "sigmoid": 1 / (1 + np.exp(-t)),
             "rsqrt": 1 / np.sqrt(q), "log1p": np.log1p(q), "expm1": np.expm1(t), "sin": np.sin(t),
             "cos": np.cos(t), "pow": q**t, "floor": np.floor(t * 4), "ceil": np.ceil(t * 4)}

    def ulp(v):
        return np.spacing(np.abs(v).astype(np.float32)).astype(np.float64)

    out = []
    for terms in ACCURATE_TERMS:
        bound = sum((b + 0.5) * ulp(value[f]) + FTZ for f, b in terms if b)
        if len(terms) > 1:
            bound = bound + ulp(np.abs(sum(value[f] for f, _ in terms)) + bound)  # at the rounded sum
        out.append(np.broadcast_to(bound, t.shape))
    return np.stack(out)


def scan_inputs(rng, rows: int, cols: int) -> dict[str, np.ndarray]:
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = {n: np.full((rows, cols), np.nan, np.float32) for n in ("s", "m", "v", "pr")}
    return {"x": x} | out


def scan_meaning(x: np.ndarray, br: int) -> dict[str, np.ndarray]:
    """The scans of each [BR, C] block (cumsum along axis 0 restarts at each block of rows)."""
    t = x.astype(np.float64)
    v = np.concatenate([np.cumsum(t[i : i + br], axis=0) for i in range(0, t.shape[0], br)])
    return {"s": np.cumsum(t, axis=1), "m": np.maximum.accumulate(t, axis=1), "v": v,
            "pr": np.cumprod(1 + t * 0.01, axis=1)}


def gather_inputs(rng, vocab: int, width: int, m: int) -> dict[str, np.ndarray]:
    ids = rng.integers(-3, vocab + 3, m).astype(np.int32)  # some out of range: they read 0
    return {"E": rng.standard_normal((vocab, width)).astype(np.float32), "ids": ids,
            "out": np.full((m, width), np.nan, np.float32)}


def gather_meaning(E: np.ndarray, ids: np.ndarray) -> np.ndarray:
    inside = (ids >= 0) & (ids < E.shape[0])
    return np.where(inside[:, None], E[np.clip(ids, 0, E.shape[0] - 1)], 0.0)


def bit_inputs(rng, n: int) -> dict[str, np.ndarray]:
    a = rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(0, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    return {"a": a, "b": b, "y": np.zeros((5, n), np.int32)}


def bit_meaning(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Shifts by 32..39 shift every bit out: 0 to the left, the sign to the right."""
    a64, n = a.astype(np.int64), (b % 40).astype(np.int64)
    left = np.where(n >= 32, 0, (a64 << np.minimum(n, 31)) & 0xFFFFFFFF)
    left = np.where(left >= 2**31, left - 2**32, left)
    right = np.where(n >= 32, a64 >> 31, a64 >> np.minimum(n, 31))
    return np.stack([a & b, a | b, a ^ b, left, right]).astype(np.int32)
