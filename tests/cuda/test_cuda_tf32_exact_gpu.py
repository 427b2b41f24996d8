"""On the GPU: TF32 dots round their operands exactly as the interpreter does (to nearest, ties to
even: docs/language.md §4.1), checked bit for bit where the arithmetic around the rounding is exact.

A tolerance test cannot see a wrong rounding mode (ties away from zero moves a value by one unit
of its 11th bit, well inside any tolerance), so the operands here are built from edge patterns of
the 13 bits TF32 drops (ties at kept parts of both parities, one below and one above a tie, values
that round up into the next binade, subnormals) and each product stands alone:
- matmul: each row of A has one nonzero, so C[i, j] = tf32(A[i, k_i]) * tf32(B[k_i, j]) plus
  zeros; the product of two 11-bit significands is exact in f32 (the scales keep it normal, the
  subnormal A values meet B rows near 2^100), alpha = 1 and beta = 0;
- attention (mha_tf32.phk): Q = 0 and one key, so every score is 0, p = 1, l = 1 and
  O[h, 0, :] = tf32(V[h, 0, :]).
The test also checks that it can fail: rounding ties away from zero, or truncating, would change
a large share of the results.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import load_example

from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.interp import interpreter as interp
from compiler.interp import values as val

pytestmark = pytest.mark.gpu

TIE = 0x1000  # the 13 dropped bits of a value halfway between two TF32 values
LOW_PARTS = [0x0000, 0x0001, 0x0FFF, 0x1001, 0x1FFF]  # the other edges of the dropped bits
KEPT_PARTS = [0x000, 0x001, 0x3FE, 0x3FF]  # 0x3ff plus a round-up crosses into the next binade


def edge_bits(rng, shape, exponents: tuple[int, int] | None) -> np.ndarray:
    """f32 bit patterns: biased exponents in [lo, hi], or subnormal (exponent field 0) for None;
    dropped bits a tie for 40 %, another edge for 30 %, random for the rest; half of the kept
    parts from the edge list, the rest random; random signs; no zeros."""
    kind = rng.random(shape)
    edge = rng.choice(np.array(LOW_PARTS, np.uint32), shape)
    low = np.where(kind < 0.4, TIE, np.where(kind < 0.7, edge, rng.integers(0, 1 << 13, shape)))
    kept = np.where(rng.random(shape) < 0.5, rng.choice(KEPT_PARTS, shape), rng.integers(0, 1 << 10, shape))
    exp = np.zeros(shape, np.int64) if exponents is None else rng.integers(*exponents, shape, endpoint=True)
    sign = rng.integers(0, 2, shape)
    bits = ((sign << 31) | (exp << 23) | (kept << 13) | low).astype(np.uint32)
    return np.where((bits & 0x7FFFFFFF) == 0, np.uint32(0x3F801000), bits)


def matmul_operands(rng, m: int, n: int, k: int, subnormal: bool):
    """A [m, k] with one nonzero per row at column i % k; B [k, n]. With `subnormal`, rows whose
    column is in the upper half of k hold subnormals and meet B rows scaled near 2^100."""
    a = np.zeros((m, k), np.uint32)
    rows, cols = np.arange(m), np.arange(m) % k
    upper = cols >= k // 2
    a[rows, cols] = edge_bits(rng, (m,), (107, 147))
    if subnormal:
        a[rows[upper], cols[upper]] = edge_bits(rng, (int(upper.sum()),), None)
    b = edge_bits(rng, (k, n), (107, 147))
    if subnormal:
        b[k // 2 :] = edge_bits(rng, (k - k // 2, n), (227, 230))
    return a.view(np.float32), b.view(np.float32)


def other_roundings(bits: np.ndarray) -> dict[str, np.ndarray]:
    """The wrong roundings the test must tell apart (for finite values): ties away, truncation."""
    keep = np.uint32(0xFFFFE000)
    return {"ties away": (bits + np.uint32(0x1000)) & keep, "truncation": bits & keep}


def _assert_discriminates(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> None:
    """Had the GPU rounded another way, at least a tenth of the results would differ."""
    wrong_a, wrong_b = other_roundings(a.view(np.uint32)), other_roundings(b.view(np.uint32))
    for what in wrong_a:
        wrong = wrong_a[what].view(np.float32).astype(np.float64) @ wrong_b[what].view(np.float32)
        assert np.mean(wrong != ref) > 0.1, what


def _assert_equal(got: np.ndarray, ref: np.ndarray) -> None:
    """Bit-for-bit up to the sign of zero (== equates 0 and -0: a sum's zero may take either)."""
    diff = np.flatnonzero(got != ref)
    first = [(int(i), float(got.flat[i]), float(ref.flat[i])) for i in diff[:5]]
    assert diff.size == 0, f"{diff.size} of {ref.size} differ; first (index, GPU, interpreter): {first}"


TMA = Schedule(wgmma=True, stages=4, tma=True)
MATMUL_CASES = [  # (example, tile point, schedule, kernel-wide tf32)
    ("matmul_tf32.phk", {"TILE_M": 64, "TILE_N": 64, "TILE_K": 16}, Schedule(), False),
    ("matmul_tf32.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True), False),
    ("matmul_tf32.phk", {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, Schedule(wgmma=True, order="grouped"),
     False),
    ("matmul.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(), True),
    # the TMA ring by role swap: the copy engine rounds (TFLOAT32 maps), nothing in the kernel does
    ("matmul_tf32.phk", {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, TMA, False),
    ("matmul.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, TMA, True),
]


def _case_id(case) -> str:
    schedule = case[2]
    return f"{case[0]}-{'tma' if schedule.tma else 'wgmma' if schedule.wgmma else 'mma'}"


@pytest.mark.parametrize("subnormal", [False, True], ids=["normal", "subnormal"])
@pytest.mark.parametrize("case", MATMUL_CASES, ids=_case_id)
def test_tf32_matmul_rounds_operands_exactly_as_the_interpreter(case, subnormal):
    from compiler.cuda.launch import run_kernel_gpu

    name, point, schedule, tf32 = case
    kernel = load_example(name)
    m, n, k = (256, 128, 64) if name == "matmul.phk" else (200, 136, 64)  # matmul.phk: aligned
    rng = np.random.default_rng(1400 + len(name) + 2 * subnormal)
    a, b = matmul_operands(rng, m, n, k, subnormal)
    bound = binding.bind(kernel, {"M": m, "N": n, "K": k}, None, point)
    scalars = {"alpha": 1.0, "beta": 0.0}
    if tf32:  # the kernel-wide opt-in is the compiler's: the interpreter's TF32 dot, by hand
        ref = (val.round_to("tf32", a) @ val.round_to("tf32", b)).astype(np.float32)
    else:
        tensors = {"A": a.copy(), "B": b.copy(), "C": np.zeros((m, n), np.float32)}
        interp.run_kernel(kernel, bound, tensors, scalars)
        ref = tensors["C"]
    assert np.isfinite(ref).all() and np.mean(ref != 0) > 0.9  # zero: a subnormal rounded to 0
    _assert_discriminates(a, b, ref)
    got = run_kernel_gpu(kernel, bound, {"A": a, "B": b, "C": np.zeros((m, n), np.float32)}, scalars,
                         schedule=schedule, tf32=tf32)
    _assert_equal(got["C"], ref)


@pytest.mark.parametrize("point", [{"BR": 64, "BC": 32}, {"BR": 128, "BC": 64}], ids=str)
def test_tf32_attention_rounds_v_exactly_as_the_interpreter(point):
    from compiler.cuda.launch import run_kernel_gpu

    kernel = load_example("mha_tf32.phk")
    h, d = 8, 64
    rng = np.random.default_rng(1414)
    v = edge_bits(rng, (h, 1, d), (107, 147)).view(np.float32)
    arrays = {
        "Q": np.zeros((h, 1, d), np.float32),
        "K": rng.standard_normal((h, 1, d)).astype(np.float32),
        "V": v,
        "O": np.full((h, 1, d), np.nan, np.float32),
    }
    bound = binding.bind(kernel, {"H": h, "N": 1, "D": d}, None, point)
    ref = {name: x.copy() for name, x in arrays.items()}
    interp.run_kernel(kernel, bound, ref, {"scale": 0.125})
    for what, wrong in other_roundings(v.view(np.uint32)).items():
        assert np.mean(wrong.view(np.float32) != ref["O"]) > 0.1, what
    got = run_kernel_gpu(kernel, bound, arrays, {"scale": 0.125})
    _assert_equal(got["O"], ref["O"])
