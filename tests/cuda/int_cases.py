"""Kernels of the integer and bool dtypes, take's wide indices and the atomics (issue 37 items 3
and 4), with their meaning in plain numpy: the interpreter is checked against these meanings
(tests/compiler/test_int_dtypes.py), NVRTC compiles them (test_ints_atomics.py) and the GPU
agrees with the interpreter (test_ints_atomics_gpu.py)."""

from __future__ import annotations

import numpy as np

from compiler.frontend import load as frontend

INTS = """\
@autotune(B in [128, 256])
kernel ints(a: tensor<i64>[N], b: tensor<u32>[N], c: tensor<u8>[N], f: tensor<bool>[N], s: i64, t: u32,
            y: tensor<i64>[5, N], z: tensor<u32>[5, N], w: tensor<u8>[N], g: tensor<bool>[N]) {
  let i = ctx.block.x * B
  let x = load(a[i :+ B], fill = 0)
  let u = load(b[i :+ B], fill = 1)
  let v = load(c[i :+ B])
  let q = load(f[i :+ B], fill = false)
  y[0, i :+ B] = x / 7 + s
  y[1, i :+ B] = x % -5
  y[2, i :+ B] = shift_right(x, 3) + i64(v)
  y[3, i :+ B] = where(q, x, u)
  y[4, i :+ B] = shift_left(x, i64(v) % 70) + bit_not(x)
  z[0, i :+ B] = u / 3 + t
  z[1, i :+ B] = bit_xor(u, 4000000000)
  z[2, i :+ B] = shift_left(u, 31) + shift_right(u, u % 40)
  z[3, i :+ B] = u32(f32(v) * 1.5)
  z[4, i :+ B] = u32(x) * u % 1000
  w[i :+ B] = v * 3 + 1
  g[i :+ B] = not q and x > 0
}
"""

CONVERT = """\
@autotune(B in [128])
kernel convert(x: tensor<f32>[N], l: tensor<i64>[N], y: tensor<i32>[3, N], z: tensor<i64>[2, N],
               u: tensor<u32>[2, N]) {
  let i = ctx.block.x * B
  let v = load(x[i :+ B])
  let n = load(l[i :+ B])
  y[0, i :+ B] = i32(v)
  y[1, i :+ B] = i32(n)
  y[2, i :+ B] = i32(u32(n))
  z[0, i :+ B] = i64(v)
  z[1, i :+ B] = i64(u32(n))
  u[0, i :+ B] = u32(v)
  u[1, i :+ B] = u32(n)
}
"""

GATHER_WIDE = """\
@autotune(BM in [16, 64], BD in [32])
kernel gather_wide(E: tensor<f32>[V, D], ids: tensor<i64>[M], uids: tensor<u32>[M],
                   out: tensor<f32>[2, M, D]) {
  let m = ctx.block.x * BM
  let d = ctx.block.y * BD
  out[0, m :+ BM, d :+ BD] = take(E[:, d :+ BD], load(ids[m :+ BM]), axis = 0)
  out[1, m :+ BM, d :+ BD] = take(E[:, d :+ BD], load(uids[m :+ BM]), axis = 0)
}
"""

HIST = """\
@autotune(B in [64, 256])
kernel hist(x: tensor<i32>[N], w: tensor<f32>[N], counts: tensor<i32>[NB], mass: tensor<f32>[NB],
            top: tensor<i64>[NB], low: tensor<f32>[NB], total: tensor<u32>[1]) {
  let i = ctx.block.x * B
  let b = load(x[i :+ B], fill = -1)
  let v = load(w[i :+ B])
  for j in range(0, NB) {
    atomic_add(counts[j], sum(where(b == j, 1, 0), axis = 0))
    atomic_add(mass[j], sum(where(b == j, v, 0.0), axis = 0))
    atomic_max(top[j], i64(max(where(b == j, i, -1), axis = 0)))
    atomic_min(low[j], min(where(b == j, v, inf), axis = 0))
  }
  atomic_add(total[0], u32(sum(where(b >= 0, 1, 0), axis = 0)))
}
"""

# row sums over column chunks: every CTA along y adds its chunk's partial into the same rows
ROW_SUMS = """\
@autotune(BR in [8, 32], BC in [64])
kernel row_sums(x: tensor<f32>[R, C], k: tensor<i32>[R, C], s: tensor<f32>[R], t: tensor<i64>[R],
                m: tensor<i32>[R]) {
  let r = ctx.block.x * BR
  let c = ctx.block.y * BC
  atomic_add(s[r :+ BR], sum(x[r :+ BR, c :+ BC], axis = 1))
  atomic_add(t[r :+ BR], i64(sum(load(k[r :+ BR, c :+ BC]), axis = 1)))
  atomic_max(m[r :+ BR], max(load(k[r :+ BR, c :+ BC], fill = -2147483647), axis = 1))
}
"""


def kernel(text: str, name: str):
    return frontend.load_text(text, f"{name}.phk").kernel()


# ---- inputs and meanings ------------------------------------------------------------------


def int_inputs(rng, n: int) -> dict[str, np.ndarray]:
    return {
        "a": rng.integers(-2**62, 2**62, n), "b": rng.integers(0, 2**32, n, dtype=np.uint32),
        "c": rng.integers(0, 256, n, dtype=np.uint8), "f": rng.random(n) < 0.5,
        "y": np.zeros((5, n), np.int64), "z": np.zeros((5, n), np.uint32), "w": np.zeros(n, np.uint8),
        "g": np.zeros(n, bool),
    }


INT_SCALARS = {"s": 2**40 + 3, "t": 4_000_000_000}


def _shl(x: np.ndarray, n: np.ndarray, bits: int) -> np.ndarray:
    """Shift left with PTX's clamp: a count of the width or more gives 0."""
    unsigned = np.dtype(f"u{bits // 8}")
    big = n.astype(np.int64) >= bits
    safe = np.where(big, 0, n).astype(unsigned)
    return np.where(big, 0, x.view(unsigned) << safe).astype(unsigned).view(x.dtype)


def int_meaning(arrays: dict[str, np.ndarray], s: int, t: int) -> dict[str, np.ndarray]:
    a, u, v, f = arrays["a"], arrays["b"], arrays["c"], arrays["f"]
    v64 = v.astype(np.int64)
    with np.errstate(over="ignore"):
        y = np.stack([a // 7 + s, a % -5, (a >> 3) + v64, np.where(f, a, u.astype(np.int64)),
                      _shl(a, v64 % 70, 64) + ~a])
        count = u % np.uint32(40)
        shr = np.where(count >= 32, 0, u >> np.minimum(count, 31)).astype(np.uint32)
        z = np.stack([u // np.uint32(3) + np.uint32(t), u ^ np.uint32(4_000_000_000),
                      (u << np.uint32(31)) + shr,
                      (v.astype(np.float32) * np.float32(1.5)).astype(np.uint32),
                      a.astype(np.uint32) * u % np.uint32(1000)])
    w = ((v.astype(np.int32) * 3 + 1) & 0xFF).astype(np.uint8)
    return {"y": y, "z": z, "w": w, "g": ~f & (a > 0)}


def convert_inputs(rng, n: int) -> dict[str, np.ndarray]:
    specials = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -1e19, 2.5, -2.5, -0.7, 4.3e9],
                        np.float32)
    x = rng.normal(0, 1e6, n).astype(np.float32)
    x[: len(specials)] = specials
    return {"x": x, "l": rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64),
            "y": np.zeros((3, n), np.int32), "z": np.zeros((2, n), np.int64),
            "u": np.zeros((2, n), np.uint32)}


def _saturate(x: np.ndarray, dtype) -> np.ndarray:
    """f32 to an integer: toward zero, clamped to the type, NaN to 0 (cvt.rzi)."""
    info = np.iinfo(dtype)
    out = []
    for value in x.astype(np.float64):
        if np.isnan(value):
            out.append(0)
        else:
            out.append(int(min(max(np.trunc(value), info.min), info.max)))
    return np.array(out, dtype=dtype)


def convert_meaning(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x, n = arrays["x"], arrays["l"]
    low32 = n.astype(np.uint32)
    return {
        "y": np.stack([_saturate(x, np.int32), n.astype(np.int32), low32.view(np.int32)]),
        "z": np.stack([_saturate(x, np.int64), low32.astype(np.int64)]),
        "u": np.stack([_saturate(x, np.uint32), low32]),
    }


def gather_inputs(rng, vocab: int, width: int, m: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, vocab, m).astype(np.int64)
    ids[:6] = [-1, vocab, 2**32 + 1, -(2**40), vocab - 1, 0]  # outside (even past 32 bits) reads 0
    uids = rng.integers(0, vocab, m).astype(np.uint32)
    uids[:3] = [vocab, 2**32 - 1, 2**31]
    return {"E": rng.standard_normal((vocab, width)).astype(np.float32), "ids": ids, "uids": uids,
            "out": np.full((2, m, width), np.nan, np.float32)}


def gather_meaning(E: np.ndarray, ids: np.ndarray, uids: np.ndarray) -> np.ndarray:
    def rows(index):
        index = index.astype(np.int64)
        valid = (index >= 0) & (index < len(E))
        return np.where(valid[:, None], E[np.where(valid, index, 0)], 0.0)

    return np.stack([rows(ids), rows(uids)]).astype(np.float32)


def hist_inputs(rng, n: int, bins: int) -> dict[str, np.ndarray]:
    return {"x": rng.integers(0, bins, n).astype(np.int32), "w": rng.random(n).astype(np.float32),
            "counts": np.zeros(bins, np.int32), "mass": np.zeros(bins, np.float32),
            "top": np.full(bins, -5, np.int64), "low": np.full(bins, np.inf, np.float32),
            "total": np.full(1, 7, np.uint32)}


def hist_meaning(arrays: dict[str, np.ndarray], block: int, bins: int) -> dict[str, np.ndarray]:
    x, w = arrays["x"], arrays["w"]
    starts = (np.arange(len(x)) // block) * block
    top = np.array([max(starts[x == j].max(initial=-1), -5) for j in range(bins)], np.int64)
    low = np.array([w[x == j].min(initial=np.inf) for j in range(bins)], np.float32)
    return {"counts": np.bincount(x, minlength=bins).astype(np.int32),
            "mass": np.bincount(x, w.astype(np.float64), minlength=bins), "top": top, "low": low,
            "total": np.array([len(x) + 7], np.uint32)}


def row_sum_inputs(rng, rows: int, cols: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((rows, cols)).astype(np.float32),
            "k": rng.integers(-2**30, 2**30, (rows, cols)).astype(np.int32),
            "s": np.ones(rows, np.float32), "t": np.zeros(rows, np.int64),
            "m": np.full(rows, -2**31, np.int32)}


def row_sum_meaning(arrays: dict[str, np.ndarray], bc: int) -> dict[str, np.ndarray]:
    """Each CTA's i32 sum of its chunk wraps before the i64 add (what the kernel writes)."""
    k = arrays["k"]
    rows, cols = k.shape
    chunks = [k[:, c:c + bc].astype(np.int64).sum(axis=1) for c in range(0, cols, bc)]
    wrapped = [((c + 2**31) % 2**32 - 2**31) for c in chunks]
    total = 1.0 + arrays["x"].astype(np.float64).sum(axis=1)
    return {"s": total, "t": np.sum(wrapped, axis=0), "m": k.max(axis=1)}
