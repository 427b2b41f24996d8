"""The accumulation of an fp8 dot on Hopper's fp8 warpgroup MMA, as docs/language.md §8.1 states
it and compiler/cuda/mainloops/wgmma/fp8_promote.py relies on, written apart in numpy: what the GPU tests of
fp8 GEMMs derive their tolerance from.

One k32 step of the tensor core adds 32 exact products to the accumulator it continues: each of
the 33 terms is truncated toward zero to a multiple of 2^(E - MANTISSA), E the exponent of the
largest term's leading bit, the terms are added exactly and the sum is truncated toward zero to
MANTISSA bits after its own leading bit. With the whole k loop as one chain this reproduces the
H100's error of benchmarks/results/h100-2026-12-07/gpu-tests.log bit for bit
(tests/cuda/test_fp8_accumulation.py). Every computation here is exact in float64: fp8 products
have at most 8 significant bits, and a sum of 33 multiples of 2^(E - 13) below 2^(E + 6) has
fewer than 20.
"""

from __future__ import annotations

import hashlib

import numpy as np

MANTISSA = 13  # bits the fp8 tensor core keeps after the leading bit
STEP_K = 32  # products per wgmma k step
TILE_K = 128  # products per k tile: the promotion interval (fp8_promote.GROUP_PRODUCTS)
U32 = 2.0**-24  # f32 unit roundoff


def _truncate(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """x toward zero to a multiple of 2^(exponent - MANTISSA) (ldexp: exact scalings by 2^n)."""
    return np.ldexp(np.trunc(np.ldexp(x, MANTISSA - exponent)), exponent - MANTISSA)


def _leading_exponent(x: np.ndarray) -> np.ndarray:
    """floor(log2 |x|), as integers (0 for x = 0): one below frexp's exponent, read off the bits."""
    _, e = np.frexp(x)
    return np.where(x != 0, e - 1, 0)


def tensor_core_step(c: np.ndarray, products: np.ndarray) -> np.ndarray:
    """One k32 step: c[m, n] continued by products[m, n, 32] (overwritten). The terms are scaled
    by 2^(MANTISSA - E) in place (exact), truncated there to integers and summed, exactly, then
    scaled back: the same value as truncating each term in its own units, with no copy of the 33
    terms (the step's arrays are M x N x 32 float64s: this halves the model's time)."""
    e = _leading_exponent(np.maximum(np.abs(products).max(-1), np.abs(c)))
    up = np.ldexp(1.0, MANTISSA - e)
    products *= up[..., None]
    np.trunc(products, out=products)
    s = (products.sum(-1) + np.trunc(c * up)) / up
    return _truncate(s, _leading_exponent(s))


_SUMS: dict = {}  # (operands' bytes digest, chain_tiles) -> tile_sums: the GPU tests share inputs


def tile_sums(a: np.ndarray, bt: np.ndarray, chain_tiles: bool = False) -> np.ndarray:
    """[tiles, M, N]: each k tile's tensor-core sum from zero (a k tile past K reads zeros), or,
    with `chain_tiles`, the one-chain k loop's running value after each tile (the old defect)."""
    digest = hashlib.sha256(a.tobytes() + bt.tobytes()).hexdigest()
    key = (digest, a.shape, bt.shape, str(a.dtype), chain_tiles)
    if key not in _SUMS:
        _SUMS[key] = _tile_sums(a, bt, chain_tiles)
        _SUMS[key].setflags(write=False)
    return _SUMS[key]


def _tile_sums(a: np.ndarray, bt: np.ndarray, chain_tiles: bool) -> np.ndarray:
    a, bt = a.astype(np.float64), bt.astype(np.float64)
    k = a.shape[1]
    padded = -(-k // TILE_K) * TILE_K
    a = np.pad(a, ((0, 0), (0, padded - k)))
    bt = np.pad(bt, ((0, 0), (0, padded - k)))
    out = []
    c = np.zeros((a.shape[0], bt.shape[0]))
    for t in range(padded // TILE_K):
        if not chain_tiles:
            c = np.zeros_like(c)
        for s in range(TILE_K // STEP_K):
            lo = t * TILE_K + s * STEP_K
            c = tensor_core_step(c, a[:, None, lo:lo + STEP_K] * bt[None, :, lo:lo + STEP_K])
        out.append(c)
    return np.stack(out)


def gpu_result(a, bt, scale: np.ndarray, chain_tiles: bool = False) -> np.ndarray:
    """What the fp8 warpgroup-MMA GEMM computes before its output rounding, in f32: the k tiles'
    tensor-core sums added into a zeroed f32 accumulator in k order, times the f32 scale product
    `scale` once after the loop (fp8.py's GEMM form); `chain_tiles`: without the promotion."""
    sums = tile_sums(a, bt, chain_tiles)
    if chain_tiles:
        acc = sums[-1].astype(np.float32)
    else:
        acc = np.zeros(sums.shape[1:], np.float32)
        for t in sums:
            acc = acc + t.astype(np.float32)
    return acc * scale.astype(np.float32)


def f32_difference_bound(a, bt, scale: np.ndarray, fp8_mma: bool) -> np.ndarray:
    """How far, element by element, the interpreter's C and the GPU's may be apart before the
    output rounding. The products are exact in f32 on both sides. The interpreter sums the K
    products in f32 and scales each k tile's dot (f32 products of the scales): within
    (K + 2) u Σ|a b| |s| of the exact (scaled) value. The GPU, on the f16 path, does the same in
    another order; on fp8 warpgroup MMA it sums each k tile on the tensor core (tile_sums:
    off the exact value by what that computes, exactly), adds the tiles' sums in f32 ((T + 2) u
    Σ_t |T_t| more, T tiles, with the scale's two roundings) and scales once."""
    a64, b64 = a.astype(np.float64), bt.astype(np.float64)
    k = a.shape[1]
    s = np.abs(scale.astype(np.float64))
    exact = a64 @ b64.T
    magnitude = np.abs(a64) @ np.abs(b64).T
    interpreter = (k + 2) * U32 * magnitude * s
    if not fp8_mma:
        return 2 * interpreter
    sums = tile_sums(a, bt)
    tiles = sums.shape[0]
    tensor_core = np.abs(sums.sum(0) - exact) * s
    adds = (tiles + 2) * U32 * np.abs(sums).sum(0) * s
    return interpreter + tensor_core + adds


def rounded_bound(bound: np.ndarray, ref_out: np.ndarray, unit: float) -> np.ndarray:
    """The bound after both sides round to an output type of unit roundoff `unit` (bf16: 2^-8),
    ref_out the interpreter's rounded value R: |rd(g) - rd(r)| <= |g - r| + unit (|g| + |r|),
    with |r| <= |R| / (1 - unit) and |g| <= |r| + |g - r|."""
    r = np.abs(ref_out.astype(np.float64)) / (1 - unit)
    return bound * (1 + unit) + 2 * unit * r
