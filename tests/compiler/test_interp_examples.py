"""Every example kernel, run by the reference interpreter, against an independent numpy version.

Sizes are small and ragged (not multiples of the tiles) wherever the kernel allows it, so that
masked loads and dropped stores at the edges are exercised. References are computed in float64.

Tolerances: f32 arithmetic rounds each operation with relative error eps = 2^-24 ~ 6e-8. A sum of
n terms accumulated in f32 has an error growing like sqrt(n) * eps * sum|terms| for random
rounding (the worst case is n * eps); we allow 8 * sqrt(n) * eps * sum|terms|, comfortably above
the typical error and far below any real bug (a wrong element is off by O(1) of the sum).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from compiler.frontend.binding import bind
from compiler.frontend.load import load_file
from compiler.interp.interpreter import run_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPS32 = 2.0**-24


def kernel_of(name: str):
    return load_file(EXAMPLES / f"{name}.phk").kernel()


def run(name: str, dims: dict, tensors: dict, scalars: dict | None = None, tiles: dict | None = None):
    kernel = kernel_of(name)
    binding = bind(kernel, dims, {n: a.shape for n, a in tensors.items()}, tiles)
    run_kernel(kernel, binding, tensors, scalars or {})
    return tensors


def assert_sum_close(actual, expected, magnitude, n_terms):
    """`magnitude` is sum|terms| per element: the scale of rounding error in an f32 sum."""
    bound = 8 * np.sqrt(n_terms) * EPS32 * magnitude + 1e-30
    err = np.abs(actual.astype(np.float64) - expected)
    assert np.all(err <= bound), f"max error {err.max()} vs bound {bound.reshape(-1)[np.argmax(err)]}"


def rng(seed=0):
    return np.random.default_rng(seed)


def f32(*shape, seed=0):
    return rng(seed).standard_normal(shape).astype(np.float32)


def tf32_reference(x: np.ndarray) -> np.ndarray:
    """x rounded to 11 significant bits, to nearest, ties to even, in float64 (x normal or zero):
    written apart from the interpreter's bit arithmetic on purpose."""
    mantissa, exponent = np.frexp(x.astype(np.float64))  # |mantissa| in [0.5, 1)
    return np.ldexp(np.round(mantissa * 2.0**11), exponent - 11)  # np.round: half to even


def autotune_points(name: str) -> list[dict[str, int]]:
    """The corners of the kernel's @autotune space plus a middle point (used for independence)."""
    space = [(d.name, d.values) for d in kernel_of(name).autotune.dims]
    corners = [dict(zip([n for n, _ in space], combo, strict=True))
               for combo in itertools.product(*[sorted({v[0], v[-1]}) for _, v in space])]
    middle = {n: v[len(v) // 2] for n, v in space}
    return corners + [middle]


# ------------------------------------------------------------------------------------- cases
# Each case: run at given tile values, return (actual, reference float64, magnitude, n_terms).


def case_add(tiles):
    a, b = f32(1000, seed=1), f32(1000, seed=2)
    out = run("add", {"N": 1000}, {"a": a, "b": b, "c": np.full(1000, np.nan, np.float32)}, tiles=tiles)
    ref = a.astype(np.float64) + b
    return out["c"], ref, np.abs(a) + np.abs(b), 1


def case_axpby(tiles):
    x, y = f32(70, 45, seed=1), f32(70, 45, seed=2)
    out = run("axpby", {"M": 70, "N": 45}, {"x": x, "y": y, "out": np.zeros((70, 45), np.float32)},
              {"alpha": 1.5, "beta": -0.25}, tiles)
    ref = 1.5 * x.astype(np.float64) - 0.25 * y
    return out["out"], ref, 1.5 * np.abs(x) + 0.25 * np.abs(y), 2


def case_matmul(tiles):
    m, n, k = 256, 256, 64  # @aligned: multiples of the largest TILE_M/TILE_N (256) and TILE_K (32)
    a, b, c = f32(m, k, seed=1), f32(k, n, seed=2), f32(m, n, seed=3)
    out = run("matmul", {"M": m, "N": n, "K": k}, {"A": a, "B": b, "C": c.copy()},
              {"alpha": 0.5, "beta": 2.0}, tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = 0.5 * a64 @ b64 + 2.0 * c
    return out["C"], ref, 0.5 * np.abs(a64) @ np.abs(b64) + 2 * np.abs(c), k + 1


def case_matmul_plain(tiles):
    m, n, k = 70, 45, 37
    a, b = f32(m, k, seed=1), f32(k, n, seed=2)
    out = run("matmul_plain", {"M": m, "N": n, "K": k},
              {"A": a, "B": b, "C": np.full((m, n), np.nan, np.float32)}, tiles=tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return out["C"], a64 @ b64, np.abs(a64) @ np.abs(b64), k


def _attention_ref(q, k, v, scale, causal):
    s = scale * q.astype(np.float64) @ k.astype(np.float64).T
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    # Magnitude: the softmax weights are a convex combination, each output is bounded by the
    # weighted sum of |v|; the scores carry D-term dot products whose error exp() amplifies by
    # at most |s|, so we scale by (1 + max|s|) as well.
    mag = (p @ np.abs(v)) * (1 + np.abs(np.where(np.isfinite(s), s, 0)).max())
    return p @ v, mag


def case_flash_attention(tiles):
    nq = nk = 200
    q, k, v = f32(nq, 64, seed=1), f32(nk, 64, seed=2), f32(nk, 64, seed=3)
    out = run("flash_attention", {"Nq": nq, "Nk": nk}, {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)},
              {"scale": 0.125}, tiles)
    ref, mag = _attention_ref(q, k, v, 0.125, causal=False)
    return out["O"], ref, mag, nk + 64


def case_decode_gqa(tiles):
    g, s = 8, 1000  # a ragged last key block, masked
    q, k, v = f32(g, 128, seed=1), f32(s, 128, seed=2), f32(s, 128, seed=3)
    out = run("decode_gqa", {"G": g, "S": s}, {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)},
              {"scale": 0.125}, tiles)
    ref, mag = _attention_ref(q, k, v, 0.125, causal=False)
    return out["O"], ref, mag, s + 128


def case_causal_attention(tiles):
    n = 200
    q, k, v = f32(n, 64, seed=1), f32(n, 64, seed=2), f32(n, 64, seed=3)
    out = run("causal_attention", {"N": n}, {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)},
              {"scale": 0.125}, tiles)
    ref, mag = _attention_ref(q, k, v, 0.125, causal=True)
    return out["O"], ref, mag, n + 64


def case_softmax(tiles):
    r, c = 37, 300
    x = 3 * f32(r, c, seed=1)
    out = run("softmax", {"R": r, "C": c}, {"x": x, "y": np.full((r, c), np.nan, np.float32)}, tiles=tiles)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    # exp's argument is up to ~20 in magnitude: its relative error grows to ~20 eps; the row sum
    # adds sqrt(C) eps. Each output is a ratio, so the bound is relative to the value itself.
    return out["y"], ref, ref * (1 + np.abs(x64).max()), c


def case_layernorm(tiles):
    r, c = 37, 300
    x, g, b = f32(r, c, seed=1) + 2.0, f32(c, seed=2), f32(c, seed=3)
    out = run("layernorm", {"R": r, "C": c},
              {"x": x, "gamma": g, "beta": b, "y": np.full((r, c), np.nan, np.float32)}, {"eps": 1e-5}, tiles)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    ref = (x64 - mean) * rstd * g + b
    # The mean and variance are C-term sums; x - mean cancels the offset 2.0, so the error scales
    # with |x| * rstd * |g| (the size of the normalised value before cancellation), plus |b|.
    return out["y"], ref, np.abs(x64) * rstd * np.abs(g) + np.abs(b), c


def case_matmul_tf32(tiles):
    # TF32: each operand is rounded to 11 significant bits (ties to even) first; the
    # products of rounded values are exact and the sums f32.
    a, b = f32(70, 37, seed=1), f32(37, 45, seed=2)
    return _alpha_beta_matmul("matmul_tf32", a, b, tf32_reference(a), tf32_reference(b), tiles)


def _alpha_beta_matmul(name, a, b, a64, b64, tiles):
    """C = 0.5 A B + 2 C at ragged M, N, K; a64, b64: the operands as the dot multiplies them."""
    (m, k), n = a.shape, b.shape[1]
    c = f32(m, n, seed=3)
    out = run(name, {"M": m, "N": n, "K": k}, {"A": a, "B": b, "C": c.copy()},
              {"alpha": 0.5, "beta": 2.0}, tiles)
    return out["C"], 0.5 * a64 @ b64 + 2.0 * c, 0.5 * np.abs(a64) @ np.abs(b64) + 2 * np.abs(c), k + 1


def case_transpose(tiles):
    a = f32(70, 45, seed=1)
    out = run("transpose", {"M": 70, "N": 45}, {"a": a, "b": np.full((45, 70), np.nan, np.float32)},
              tiles=tiles)
    return out["b"], a.T.astype(np.float64), np.zeros((45, 70)), 1  # a copy: exact


def _case_matmul_16bit(name, storage, tiles):
    """bf16 / f16 operands: the reference multiplies the same 16-bit values in float64."""
    a = f32(150, 72, seed=1).astype(storage)
    b = f32(72, 201, seed=2).astype(storage)
    c = np.full((150, 201), np.nan, np.float32)
    out = run(name, {"M": 150, "N": 201, "K": 72}, {"A": a, "B": b, "C": c}, tiles=tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return out["C"], a64 @ b64, np.abs(a64) @ np.abs(b64), 72


def case_matmul_bf16(tiles):
    import ml_dtypes

    return _case_matmul_16bit("matmul_bf16", ml_dtypes.bfloat16, tiles)


def case_matmul_f16(tiles):
    return _case_matmul_16bit("matmul_f16", np.float16, tiles)


CASES = {
    "add": case_add,
    "matmul_bf16": case_matmul_bf16,
    "matmul_f16": case_matmul_f16,
    "axpby": case_axpby,
    "matmul": case_matmul,
    "matmul_plain": case_matmul_plain,
    "flash_attention": case_flash_attention,
    "causal_attention": case_causal_attention,
    "decode_gqa": case_decode_gqa,
    "softmax": case_softmax,
    "layernorm": case_layernorm,
    "transpose": case_transpose,
    "matmul_tf32": case_matmul_tf32,
}
# Examples whose error bounds are not those of f32 sums: tests/compiler/test_interp_precision.py
# (matmul_fp8, whose C is bf16: tests/compiler/test_fp8.py).
PRECISION_CASES = {"mha_bf16", "causal_mha_bf16", "mha_tf32", "mha_f16", "matmul_fp8"}


def test_every_example_has_a_case():
    assert {p.stem for p in EXAMPLES.glob("*.phk")} == set(CASES) | PRECISION_CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_matches_numpy_at_default_tiles(name):
    actual, ref, mag, n = CASES[name](None)
    assert actual.shape == ref.shape
    assert_sum_close(actual, ref, mag, n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_results_do_not_depend_on_tile_values(name):
    """Corners and a middle point of the @autotune space: all agree with the reference, and
    with each other within the same bound (tile sizes only change the summation order)."""
    results = []
    for tiles in autotune_points(name):
        actual, ref, mag, n = CASES[name](tiles)
        assert_sum_close(actual, ref, mag, n)
        results.append(actual)
    for other in results[1:]:
        assert_sum_close(other, results[0].astype(np.float64), 2 * mag, n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_general_paths_agree(name, monkeypatch):
    """The strided-view loads and stores and the fused dot loops are only optimisations: forcing
    every load and store through the general gather/scatter and every loop to run iteration by
    iteration gives the same results."""
    from compiler.interp import interpreter as interp
    from compiler.interp import memory as interp_memory

    tiles = autotune_points(name)[-1]
    fast, ref, mag, n = CASES[name](tiles)
    monkeypatch.setattr(interp_memory, "_plan", lambda windows: None)
    monkeypatch.setattr(interp, "match_dot_loop", lambda loop: None)
    general, _, _, _ = CASES[name](tiles)
    assert_sum_close(general, fast.astype(np.float64), mag, n)
