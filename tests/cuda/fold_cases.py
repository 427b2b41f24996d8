"""Kernels of the reductions and scans of integer tiles (i32, i64, u32, and u8 loaded as i32)
and of long f32 scans spread over several warps, with their meaning in plain numpy: the
interpreter is checked against these meanings and NVRTC compiles them (test_folds.py), the GPU
agrees with the interpreter exactly for integers (test_ints_atomics_gpu.py) and at the scan
bound for f32 (test_builtins_gpu.py)."""

from __future__ import annotations

import numpy as np

from compiler.frontend import load as frontend

# rows: sum/max/min along axis 1 of each dtype; cols: along axis 0, one row of results per CTA;
# s*: the four scans along axis 1, v*: along axis 0 (restarting at each CTA's rows)
FOLDS = """\
@autotune(BR in [2, 8], BC in [64, 256])
kernel folds(a: tensor<i64>[R, C], u: tensor<u32>[R, C], k: tensor<i32>[R, C], c: tensor<u8>[R, C],
             rows: tensor<i64>[12, R], cols: tensor<i64>[NB, 12, C],
             sa: tensor<i64>[4, R, C], su: tensor<u32>[4, R, C], sk: tensor<i32>[4, R, C],
             va: tensor<i64>[4, R, C], vu: tensor<u32>[4, R, C], vk: tensor<i32>[4, R, C]) {
  let r = ctx.block.x * BR
  let b = ctx.block.x
  let x = load(a[r :+ BR, 0 :+ BC])
  let y = load(u[r :+ BR, 0 :+ BC], fill = 7)
  let z = load(k[r :+ BR, 0 :+ BC], fill = -3)
  let w = load(c[r :+ BR, 0 :+ BC])
  rows[0, r :+ BR] = sum(x, axis = 1)
  rows[1, r :+ BR] = max(x, axis = 1)
  rows[2, r :+ BR] = min(x, axis = 1)
  rows[3, r :+ BR] = sum(y, axis = 1)
  rows[4, r :+ BR] = max(y, axis = 1)
  rows[5, r :+ BR] = min(y, axis = 1)
  rows[6, r :+ BR] = sum(z, axis = 1)
  rows[7, r :+ BR] = max(z, axis = 1)
  rows[8, r :+ BR] = min(z, axis = 1)
  rows[9, r :+ BR] = sum(w, axis = 1)
  rows[10, r :+ BR] = max(w, axis = 1)
  rows[11, r :+ BR] = min(w, axis = 1)
  cols[b, 0, 0 :+ BC] = sum(x, axis = 0)
  cols[b, 1, 0 :+ BC] = max(x, axis = 0)
  cols[b, 2, 0 :+ BC] = min(x, axis = 0)
  cols[b, 3, 0 :+ BC] = sum(y, axis = 0)
  cols[b, 4, 0 :+ BC] = max(y, axis = 0)
  cols[b, 5, 0 :+ BC] = min(y, axis = 0)
  cols[b, 6, 0 :+ BC] = sum(z, axis = 0)
  cols[b, 7, 0 :+ BC] = max(z, axis = 0)
  cols[b, 8, 0 :+ BC] = min(z, axis = 0)
  cols[b, 9, 0 :+ BC] = sum(w, axis = 0)
  cols[b, 10, 0 :+ BC] = max(w, axis = 0)
  cols[b, 11, 0 :+ BC] = min(w, axis = 0)
  sa[0, r :+ BR, 0 :+ BC] = cumsum(x, axis = 1)
  sa[1, r :+ BR, 0 :+ BC] = cumprod(x, axis = 1)
  sa[2, r :+ BR, 0 :+ BC] = cummax(x, axis = 1)
  sa[3, r :+ BR, 0 :+ BC] = cummin(x, axis = 1)
  su[0, r :+ BR, 0 :+ BC] = cumsum(y, axis = 1)
  su[1, r :+ BR, 0 :+ BC] = cumprod(y, axis = 1)
  su[2, r :+ BR, 0 :+ BC] = cummax(y, axis = 1)
  su[3, r :+ BR, 0 :+ BC] = cummin(y, axis = 1)
  sk[0, r :+ BR, 0 :+ BC] = cumsum(z, axis = 1)
  sk[1, r :+ BR, 0 :+ BC] = cumprod(z, axis = 1)
  sk[2, r :+ BR, 0 :+ BC] = cummax(z, axis = 1)
  sk[3, r :+ BR, 0 :+ BC] = cummin(w, axis = 1)
  va[0, r :+ BR, 0 :+ BC] = cumsum(x, axis = 0)
  va[1, r :+ BR, 0 :+ BC] = cumprod(x, axis = 0)
  va[2, r :+ BR, 0 :+ BC] = cummax(x, axis = 0)
  va[3, r :+ BR, 0 :+ BC] = cummin(x, axis = 0)
  vu[0, r :+ BR, 0 :+ BC] = cumsum(y, axis = 0)
  vu[1, r :+ BR, 0 :+ BC] = cumprod(y, axis = 0)
  vu[2, r :+ BR, 0 :+ BC] = cummax(y, axis = 0)
  vu[3, r :+ BR, 0 :+ BC] = cummin(y, axis = 0)
  vk[0, r :+ BR, 0 :+ BC] = cumsum(z, axis = 0)
  vk[1, r :+ BR, 0 :+ BC] = cumprod(z, axis = 0)
  vk[2, r :+ BR, 0 :+ BC] = cummax(w, axis = 0)
  vk[3, r :+ BR, 0 :+ BC] = cummin(z, axis = 0)
}
"""

# whole 1-D tiles: reductions to a scalar and scans along one line of up to 4096 elements,
# spread over every warp of the CTA (256 threads, or 1024)
LONG = """\
@launch(threads = {threads})
@autotune(B in [1024, 4096])
kernel long_lines(x: tensor<f32>[N], a: tensor<i64>[N], u: tensor<u32>[N], k: tensor<i32>[N],
                  s: tensor<f32>[2, N], sa: tensor<i64>[N], su: tensor<u32>[N], sk: tensor<i32>[2, N],
                  tot: tensor<i64>[NB, 6]) {{
  let i = ctx.block.x * B
  let b = ctx.block.x
  let t = load(x[i :+ B])
  let y = load(a[i :+ B])
  let v = load(u[i :+ B], fill = 1)
  let z = load(k[i :+ B], fill = -5)
  s[0, i :+ B] = cumsum(t, axis = 0)
  s[1, i :+ B] = cummax(t, axis = 0)
  sa[i :+ B] = cumsum(y, axis = 0)
  su[i :+ B] = cumprod(v, axis = 0)
  sk[0, i :+ B] = cumsum(z, axis = 0)
  sk[1, i :+ B] = cummin(z, axis = 0)
  tot[b, 0] = sum(y, axis = 0)
  tot[b, 1] = max(y, axis = 0)
  tot[b, 2] = min(y, axis = 0)
  tot[b, 3] = sum(v, axis = 0)
  tot[b, 4] = min(v, axis = 0)
  tot[b, 5] = max(z, axis = 0)
}}
"""

# rows of up to 4096 columns in a CTA of 1 to 4 rows: each row over 2 to 8 warps
LONG_ROWS = """\
@autotune(BR in [1, 4], BC in [1024, 4096])
kernel long_rows(x: tensor<f32>[R, C], k: tensor<i32>[R, C], s: tensor<f32>[R, C], sk: tensor<i32>[R, C]) {
  let r = ctx.block.x * BR
  s[r :+ BR, 0 :+ BC] = cumsum(x[r :+ BR, 0 :+ BC], axis = 1)
  sk[r :+ BR, 0 :+ BC] = cumsum(load(k[r :+ BR, 0 :+ BC]), axis = 1)
}
"""


def kernel(text: str, name: str):
    return frontend.load_text(text, f"{name}.phk").kernel()


def long_kernel(threads: int = 256):
    return kernel(LONG.format(threads=threads), "long_lines")


# ---- inputs and meanings ------------------------------------------------------------------


def fold_inputs(rng, rows: int, cols: int, br: int) -> dict[str, np.ndarray]:
    nb = -(-rows // br)
    a = rng.integers(-2**62, 2**62, (rows, cols))
    a[0, :5] = [2**63 - 1, -(2**63), 3, -1, 2**62]  # sums and products wrap
    u = rng.integers(0, 2**32, (rows, cols), dtype=np.uint32)
    u[0, :3] = [2**32 - 1, 0, 2**31]
    k = rng.integers(-2**31, 2**31, (rows, cols), dtype=np.int64).astype(np.int32)
    out = {
        "rows": np.full((12, rows), -77, np.int64), "cols": np.full((nb, 12, cols), -77, np.int64),
        **{n: np.full((4, rows, cols), -77, np.int64) for n in ("sa", "va")},
        **{n: np.full((4, rows, cols), 77, np.uint32) for n in ("su", "vu")},
        **{n: np.full((4, rows, cols), -77, np.int32) for n in ("sk", "vk")},
    }
    return {"a": a, "u": u, "k": k, "c": rng.integers(0, 256, (rows, cols), dtype=np.uint8)} | out


def _blocks(x: np.ndarray, br: int, f) -> np.ndarray:
    """f along axis 0 of each block of `br` rows, stacked back (axis-0 scans restart per CTA)."""
    return np.concatenate([f(x[i:i + br]) for i in range(0, len(x), br)])


def fold_meaning(arrays: dict[str, np.ndarray], br: int, bc: int) -> dict[str, np.ndarray]:
    """The tile spans all columns (C == BC); the last CTA's rows past R read the fills (a: 0,
    u: 7, k: -3, c: 0), which enter its column folds; integer sums and products wrap."""
    rows_in = len(arrays["a"])
    nb = -(-rows_in // br)
    assert arrays["a"].shape[1] == bc, "the meaning below is for a tile as wide as the tensor"

    def padded(v, fill):
        out = np.full((nb * br, bc), fill, v.dtype)
        out[:rows_in] = v
        return out

    a, u, k = padded(arrays["a"], 0), padded(arrays["u"], 7), padded(arrays["k"], -3)
    w = padded(arrays["c"].astype(np.int32), 0)
    with np.errstate(over="ignore"):
        rows = [f(x, axis=1, dtype=x.dtype) if f is np.sum else f(x, axis=1)
                for x in (a, u, k, w) for f in (np.sum, np.max, np.min)]
        cols = np.stack([
            np.stack([f(x[i:i + br], axis=0, dtype=x.dtype) if f is np.sum else f(x[i:i + br], axis=0)
                      for x in (a, u, k, w) for f in (np.sum, np.max, np.min)])
            for i in range(0, nb * br, br)])

        def scans(x, axis, last=None):
            fs = [lambda v, ax: np.cumsum(v, axis=ax, dtype=v.dtype),
                  lambda v, ax: np.cumprod(v, axis=ax, dtype=v.dtype),
                  lambda v, ax: np.maximum.accumulate(v, axis=ax),
                  lambda v, ax: np.minimum.accumulate(v, axis=ax)]
            if axis == 1:
                return np.stack([f(x, 1) for f in fs])
            return np.stack([_blocks(x, br, lambda v, f=f: f(v, 0)) for f in fs])

        sk, vk = scans(k, 1), scans(k, 0)
        sk[3] = np.minimum.accumulate(w, axis=1)
        vk[2] = _blocks(w, br, lambda v: np.maximum.accumulate(v, axis=0))
        out = {"sa": scans(a, 1), "su": scans(u, 1), "sk": sk, "va": scans(a, 0), "vu": scans(u, 0),
               "vk": vk}
        out = {n: v[:, :rows_in] for n, v in out.items()}
        return {"rows": np.stack(rows).astype(np.int64)[:, :rows_in], "cols": cols.astype(np.int64)} | out


def long_inputs(rng, n: int, block: int) -> dict[str, np.ndarray]:
    nb = -(-n // block)
    return {
        "x": rng.standard_normal(n).astype(np.float32), "a": rng.integers(-2**62, 2**62, n),
        "u": rng.integers(1, 4, n, dtype=np.uint32),
        "k": rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32),
        "s": np.full((2, n), np.nan, np.float32), "sa": np.full(n, -77, np.int64),
        "su": np.full(n, 77, np.uint32), "sk": np.full((2, n), -77, np.int32),
        "tot": np.full((nb, 6), -77, np.int64),
    }


def long_meaning(arrays: dict[str, np.ndarray], block: int) -> dict[str, np.ndarray]:
    """Each CTA's B elements (the last one padded: x, a with 0, u with 1, k with -5)."""
    n = len(arrays["x"])
    nb = -(-n // block)

    def padded(v, fill):
        out = np.full(nb * block, fill, v.dtype)
        out[:n] = v
        return out.reshape(nb, block)

    x, a = padded(arrays["x"].astype(np.float64), 0), padded(arrays["a"], 0)
    u, k = padded(arrays["u"], 1), padded(arrays["k"], -5)
    with np.errstate(over="ignore"):
        tot = np.stack([a.sum(1, dtype=np.int64), a.max(1), a.min(1), u.sum(1, dtype=np.uint32),
                        u.min(1), k.max(1)], axis=1).astype(np.int64)
        return {
            "s": np.stack([np.cumsum(x, 1).ravel()[:n], np.maximum.accumulate(x, 1).ravel()[:n]]),
            "s_abs": np.cumsum(np.abs(x), 1).ravel()[:n],
            "sa": np.cumsum(a, 1, dtype=np.int64).ravel()[:n],
            "su": np.cumprod(u, 1, dtype=np.uint32).ravel()[:n],
            "sk": np.stack([np.cumsum(k, 1, dtype=np.int32).ravel()[:n],
                            np.minimum.accumulate(k, 1).ravel()[:n]]),
            "tot": tot,
        }


def long_row_inputs(rng, rows: int, cols: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((rows, cols)).astype(np.float32),
            "k": rng.integers(-2**31, 2**31, (rows, cols), dtype=np.int64).astype(np.int32),
            "s": np.full((rows, cols), np.nan, np.float32), "sk": np.full((rows, cols), -77, np.int32)}


# max and min of floats are fmaxf's and fminf's: a NaN against a number gives the number, and a
# fold starts from -inf (+inf), so a line of NaNs folds to -inf (+inf)
NAN_FOLDS = """\
@autotune(BR in [4, 16], BC in [64])
kernel nan_folds(x: tensor<f32>[R, C], y: tensor<f32>[R, C], e: tensor<f32>[6, R, C], r: tensor<f32>[2, R],
                 c: tensor<f32>[NB, 2, C]) {
  let i = ctx.block.x * BR
  let t = load(x[i :+ BR, 0 :+ BC])
  let u = load(y[i :+ BR, 0 :+ BC])
  e[0, i :+ BR, 0 :+ BC] = max(t, u)
  e[1, i :+ BR, 0 :+ BC] = min(t, u)
  e[2, i :+ BR, 0 :+ BC] = cummax(t, axis = 1)
  e[3, i :+ BR, 0 :+ BC] = cummin(t, axis = 1)
  e[4, i :+ BR, 0 :+ BC] = cummax(t, axis = 0)
  e[5, i :+ BR, 0 :+ BC] = cummin(t, axis = 0)
  r[0, i :+ BR] = max(t, axis = 1)
  r[1, i :+ BR] = min(t, axis = 1)
  c[ctx.block.x, 0, 0 :+ BC] = max(t, axis = 0)
  c[ctx.block.x, 1, 0 :+ BC] = min(t, axis = 0)
}
"""


def nan_inputs(rng, rows: int, cols: int, br: int) -> dict[str, np.ndarray]:
    """A row-block multiple of rows (no fill enters); NaNs scattered, one row and one column all
    NaN, leading NaNs in each row."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[rng.random((rows, cols)) < 0.2] = np.nan
    x[:, :2] = np.nan
    x[1, :] = np.nan
    x[:, 5] = np.nan
    y = rng.standard_normal((rows, cols)).astype(np.float32)
    y[rng.random((rows, cols)) < 0.3] = np.nan
    nb = rows // br
    return {"x": x, "y": y, "e": np.full((6, rows, cols), 77, np.float32),
            "r": np.full((2, rows), 77, np.float32), "c": np.full((nb, 2, cols), 77, np.float32)}


def nan_meaning(x: np.ndarray, y: np.ndarray, br: int) -> dict[str, np.ndarray]:
    lo, hi = np.where(np.isnan(x), -np.inf, x), np.where(np.isnan(x), np.inf, x)
    e = [np.fmax(x, y), np.fmin(x, y), np.maximum.accumulate(lo, axis=1), np.minimum.accumulate(hi, axis=1),
         _blocks(lo, br, lambda v: np.maximum.accumulate(v, axis=0)),
         _blocks(hi, br, lambda v: np.minimum.accumulate(v, axis=0))]
    cols = [np.stack([lo[i:i + br].max(axis=0), hi[i:i + br].min(axis=0)]) for i in range(0, len(x), br)]
    return {"e": np.stack(e).astype(np.float32), "r": np.stack([lo.max(axis=1), hi.min(axis=1)]),
            "c": np.stack(cols).astype(np.float32)}
