"""On the GPU: the tensor-core leaves (bf16 / f16 operands) equal the reference interpreter at
several tile points and schedules, ragged edges included. Tolerances follow from the operation:
- matmul: the products of 16-bit operands are exact in f32 and both sides sum in f32, in another
  order: relative error ~ sqrt(K) * 2^-24, so 1e-5 as for f32 matmul;
- attention: as the f32 attention (fast-math expf, reordered sums), plus p rounded to the operand
  type on both sides, where an expf a few ulp off can round p to the neighbouring bf16 value
  (2^-8 relative) on the GPU and not in numpy: 2e-3 for bf16, 5e-4 for f16.
Outputs are poisoned (NaN) before the run so an unwritten element fails.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from cuda_cases import load_example, random_inputs, rel_err

from compiler.cuda.schedule import WIDE_THREADS, Schedule
from compiler.frontend import binding, walk
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

MATMUL_POINTS = [
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule()),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 64}, Schedule(warps_m=2, stages=4, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 64, "TILE_K": 64}, Schedule(warps_m=4, stages=2, threads=128)),
    ({"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, Schedule(warps_m=1, stages=3, order="grouped", group=3)),
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, Schedule(wgmma=True)),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True, stages=4, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, Schedule(wgmma=True, stages=4, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, Schedule(wgmma=True, stages=5)),
    ({"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, Schedule(wgmma=True, stages=3)),
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, Schedule(wgmma=True, stages=5)),
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, Schedule(wgmma=True, stages=4, late_copies=True)),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True, stages=3, late_copies=True)),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(stages=3, late_copies=True)),
    # deep rings (a single dot: copies 6 and 4 tiles ahead)
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, Schedule(wgmma=True, stages=8, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True, stages=6, late_copies=True)),
]
MATMUL_DIMS = [{"M": 256, "N": 384, "K": 128}, {"M": 203, "N": 317, "K": 136}, {"M": 77, "N": 1000, "K": 264}]
MATMUL_TOL = 1e-5


def _check(kernel, dims, point, schedule, tol, rng, scalars_override=None) -> bool:
    """One point against the interpreter; a point the generator prunes (registers, shared
    memory) is skipped, since pruned points are never run. Whether it ran (the tests' counts of
    it are checked on the CPU by test_cuda_tc_counts.py)."""
    from compiler.cuda.compiled import compile_kernel
    from compiler.cuda.launch import run_kernel_gpu

    b = binding.bind(kernel, dims, None, point)
    try:
        compile_kernel(kernel, b, schedule=schedule)
    except CompileError as e:
        assert "is pruned" in e.message, e.message
        return False
    arrays, scalars = random_inputs(kernel, dict(b.env), rng)
    scalars.update(scalars_override or {})
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars)
    gpu_in = {n: a.copy() for n, a in arrays.items()}
    for n in walk.stored_tensors(kernel):
        if n != "C" or "beta" not in scalars:  # C_old is read (beta * C_old): not poisoned
            gpu_in[n][...] = np.nan
    got = run_kernel_gpu(kernel, b, gpu_in, scalars, schedule=schedule)
    for n in walk.stored_tensors(kernel):
        err = rel_err(got[n], ref[n])
        assert err <= tol, (kernel.name, dims, point, schedule, n, err)
    return True


@pytest.mark.parametrize("name", ["matmul_bf16.phk", "matmul_f16.phk"])
@pytest.mark.parametrize("case", range(len(MATMUL_POINTS)))
def test_matmul_on_tensor_cores_equals_interpreter(name, case):
    kernel = load_example(name)
    point, schedule = MATMUL_POINTS[case]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + case)
    ran = sum(_check(kernel, dims, point, schedule, MATMUL_TOL, rng) for dims in MATMUL_DIMS)
    assert ran == len(MATMUL_DIMS), ran


@pytest.mark.parametrize(
    "name,point",
    [
        ("matmul_tn_bf16", {"TM": 128, "TN": 128, "TK": 64}),
        ("matmul_tn_bf16", {"TM": 64, "TN": 64, "TK": 32}),
        ("matmul_narrow_f16", {"TM": 64, "TN": 32, "TK": 64}),
        ("matmul_narrow_f16", {"TM": 64, "TN": 32, "TK": 32}),
    ],
)
def test_warpgroup_mma_operand_layouts_equal_interpreter(name, point):
    """A read through transpose (the descriptor's transpose bit for a), and a 32-wide B
    (transposed into the K-major layout in shared memory), at even and ragged sizes."""
    kernel = load_example(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + point["TK"])
    ran = 0
    for dims in MATMUL_DIMS:
        for stages, late in ((3, False), (4, False), (4, True)):
            schedule = Schedule(wgmma=True, stages=stages, late_copies=late)
            ran += _check(kernel, dims, point, schedule, MATMUL_TOL, rng)
    assert ran == 3 * len(MATMUL_DIMS), ran


# The warp-specialized ring (mainloops/tma_ws/ring.py): a producer warpgroup's bulk tensor copies, mbarriers.
# Ragged M, N and K (zero fill by the copy engine), a ring that wraps many times (K = 1000), one
# and two consumer warpgroups. N = 317 has no 16-byte row pitch: pruned there.
TMA_POINTS = [
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, Schedule(wgmma=True, stages=4, order="grouped", tma=True)),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, Schedule(wgmma=True, stages=6, tma=True)),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 64}, Schedule(wgmma=True, stages=3, tma=True)),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 64}, Schedule(wgmma=True, order="grouped", group=3, tma=True)),
]
TMA_DIMS = [*MATMUL_DIMS, {"M": 300, "N": 520, "K": 200}, {"M": 256, "N": 256, "K": 1000}]


@pytest.mark.parametrize("name", ["matmul_bf16.phk", "matmul_f16.phk"])
@pytest.mark.parametrize("case", range(len(TMA_POINTS)))
def test_tma_ring_equals_interpreter(name, case):
    kernel = load_example(name)
    point, schedule = TMA_POINTS[case]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 100 + case)
    ran = sum(_check(kernel, dims, point, schedule, MATMUL_TOL, rng) for dims in TMA_DIMS)
    assert ran == len(TMA_DIMS) - 1, ran  # N = 317 (no 16-byte row pitch) is pruned


@pytest.mark.parametrize(
    "name,point,scalars",
    [
        ("matmul_f16.phk", TMA_POINTS[0][0], {}),
        ("matmul_tf32.phk", {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, {"alpha": 0.75, "beta": 0.5}),
    ],
)
def test_tma_ring_through_the_pods_prepared_launch(name, point, scalars):
    """The pods' launch path (prepared_launch): the tensor maps (16-bit, or TFLOAT32 for the TF32
    role swap) are made for each call's arrays."""
    import cupy

    from compiler.cuda.compiled import compile_kernel
    from compiler.cuda.launch import prepared_launch

    kernel = load_example(name)
    dims = {"M": 256, "N": 384, "K": 320}
    b = binding.bind(kernel, dims, None, point)
    go = prepared_launch(compile_kernel(kernel, b, schedule=TMA_POINTS[0][1]), scalars)
    rng = np.random.default_rng(5)
    for _ in range(3):
        arrays, _ = random_inputs(kernel, dict(b.env), rng)
        ref = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, ref, scalars)
        dev = {n: cupy.asarray(a) for n, a in arrays.items()}
        if "beta" not in scalars:  # C_old is read (beta * C_old): not poisoned
            dev["C"][...] = np.nan
        go(dev, None)
        assert rel_err(cupy.asnumpy(dev["C"]), ref["C"]) <= MATMUL_TOL


# Multi-head attention, all heads in one launch, against the interpreter, which rounds what the
# kernel rounds (bf16(p), the bf16/f16 output, TF32 operands). What remains: fast-math exp (ex2.approx) a few
# ulp off numpy's exp can round p, or an output element, to the neighbouring 16-bit value on one
# side only (a relative 2^-8 for bf16, 2^-11 for f16, on a few elements), and f32 sums in
# another order. The norm-wise bounds: one such flip in every element would be 2^-8 / 2^-11.
ATTENTION = [
    ("mha_bf16.phk", 2**-8),
    ("causal_mha_bf16.phk", 2**-8),
    ("mha_f16.phk", 2**-11),
    ("mha_tf32.phk", 2**-11),
]
ATTENTION_DIMS = [{"H": 3, "N": 299, "D": 64}, {"H": 2, "N": 128, "D": 64}, {"H": 2, "N": 200, "D": 128}]
ATTENTION_POINTS = [{}, {"BR": 64, "BC": 64}, {"BR": 128, "BC": 64}, {"BR": 64, "BC": 128}]


ATTENTION_SCHEDULES = [
    Schedule(),
    Schedule(wgmma=True),
    Schedule(wgmma=True, stages=4, late_copies=True),
    Schedule(wgmma=True, stages=4, rotate=True),
    Schedule(wgmma=True, stages=3, late_copies=True, rotate=True),
    # ping-pong (mainloops/pingpong/handover.py): BR = 128 only (two warpgroups), the other points are pruned
    Schedule(wgmma=True, stages=5, rotate=True, pingpong=True),
    Schedule(wgmma=True, stages=6, order="grouped", late_copies=True, rotate=True, pingpong=True),
]


# Ping-pong takes warpgroup MMA loops, which the TF32 example has not: every point of it is
# pruned (test_cuda_attention_codegen.py checks that on the CPU), so that pair runs nothing here.
ATTENTION_CASES = [
    (name, tol, i)
    for name, tol in ATTENTION
    for i, sched in enumerate(ATTENTION_SCHEDULES)
    if not (name == "mha_tf32.phk" and sched.pingpong)
]


ATTENTION_IDS = [f"{name}-{i}" for name, _, i in ATTENTION_CASES]


@pytest.mark.parametrize("name,tol,schedule", ATTENTION_CASES, ids=ATTENTION_IDS)
def test_attention_on_tensor_cores_equals_interpreter(name, tol, schedule):
    """mma.sync, and warpgroup MMA (S = Q K^T from shared memory, P V with P from registers,
    left in flight into the next iteration or, rotated, issued after the next S, or ping-pong;
    the TF32 example has no warpgroup MMA and compiles as mma.sync under every schedule but
    ping-pong, which is pruned for it)."""
    kernel = load_example(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + schedule)
    wide = ATTENTION_SCHEDULES[schedule].wgmma and name != "mha_tf32.phk"  # 128 x 128 fits (D=128 too)
    for dims in ATTENTION_DIMS:
        ran = 0
        for point in ATTENTION_POINTS + ([{"BR": 128, "BC": 128}] if wide else []):
            scalars = {"scale": dims["D"] ** -0.5}
            ran += _check(kernel, dims, point, ATTENTION_SCHEDULES[schedule], tol, rng, scalars)
        assert ran >= 1, dims  # at least one point of each shape runs


# BR = 256 on four warpgroups sharing one K/V ring (schedule.WIDE_THREADS), and on mma.sync
WIDE_ATTENTION_SCHEDULES = [
    Schedule(wgmma=True, stages=4, order="grouped", threads=WIDE_THREADS),
    Schedule(wgmma=True, stages=4, order="grouped", threads=WIDE_THREADS, rotate=True),
    Schedule(wgmma=True, stages=3, late_copies=True, threads=WIDE_THREADS, rotate=True),
    Schedule(wgmma=True, stages=5, threads=WIDE_THREADS),
    Schedule(),
]


@pytest.mark.parametrize("schedule", range(len(WIDE_ATTENTION_SCHEDULES)))
@pytest.mark.parametrize("name,tol", ATTENTION[:3], ids=[a[0] for a in ATTENTION[:3]])
def test_attention_at_256_rows_equals_interpreter(name, tol, schedule):
    """BR = 256: four warpgroups of 64 rows (plain, rotated, late copies, 5 stages) at the
    points that fit (BC = 32 at D = 64 and 128, BC = 64 at D = 64), and mma.sync (D = 64, BC =
    32); N = 128 and 200 leave most of the one CTA's rows out of range."""
    kernel = load_example(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 100 + schedule)
    ran = 0
    for dims in ATTENTION_DIMS + [{"H": 2, "N": 555, "D": 128}]:
        for point in ({"BR": 256, "BC": 32}, {"BR": 256, "BC": 64}):
            scalars = {"scale": dims["D"] ** -0.5}
            ran += _check(kernel, dims, point, WIDE_ATTENTION_SCHEDULES[schedule], tol, rng, scalars)
    # pruned, as spilling: BC = 64 at D = 128 on four warpgroups, all but D = 64, BC = 32 on mma.sync
    assert ran == (6 if WIDE_ATTENTION_SCHEDULES[schedule].wgmma else 2), ran


# K and V brought by a producer warpgroup's 3-D bulk tensor copies (mainloops/tma_ws/ring.py), the consumers
# rotated, with and without ping-pong turns; ragged N (zero-filled boxes at the end of each head)
TMA_ATTENTION_SCHEDULES = [
    Schedule(wgmma=True, stages=4, order="grouped", rotate=True, tma=True, pingpong=True),
    Schedule(wgmma=True, stages=3, rotate=True, tma=True, pingpong=True),
    Schedule(wgmma=True, stages=4, rotate=True, tma=True),
    # the softmax's row maximum as one chain (Schedule.fold_chains), with and without turns
    Schedule(wgmma=True, stages=4, order="grouped", rotate=True, tma=True, pingpong=True, fold_chains=1),
    Schedule(wgmma=True, stages=3, rotate=True, tma=True, fold_chains=1),
]
TMA_ATTENTION_DIMS = [{"H": 3, "N": 299, "D": 64}, {"H": 2, "N": 128, "D": 64}, {"H": 2, "N": 555, "D": 128}]


@pytest.mark.parametrize("schedule", range(len(TMA_ATTENTION_SCHEDULES)))
@pytest.mark.parametrize("name,tol", ATTENTION[:3], ids=[a[0] for a in ATTENTION[:3]])
def test_tma_attention_equals_interpreter(name, tol, schedule):
    """BR = 128 (two consumer warpgroups, registers handed over by setmaxnreg) at BC = 32, 64,
    128, and BR = 64 (one consumer warpgroup) without turns; every point compiles."""
    kernel = load_example(name)
    sched = TMA_ATTENTION_SCHEDULES[schedule]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 200 + schedule)
    ran = 0
    points = [{"BR": 128, "BC": bc} for bc in (32, 64, 128)]
    points += [] if sched.pingpong else [{"BR": 64, "BC": 64}]
    for dims in TMA_ATTENTION_DIMS:
        for point in points:
            scalars = {"scale": dims["D"] ** -0.5}
            ran += _check(kernel, dims, point, sched, tol, rng, scalars)
    assert ran == len(points) * len(TMA_ATTENTION_DIMS), ran


TF32_WGMMA = [  # TF32 warpgroup MMA: both operands rounded and stored K-major through registers
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, Schedule(wgmma=True, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True)),
    ({"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, Schedule(wgmma=True, order="grouped", group=3)),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 32}, Schedule(wgmma=True)),
]


def test_tf32_examples_in_source_equal_interpreter():
    """matmul_tf32.phk: precision = tf32 at the dot; the interpreter rounds the same way (to
    nearest even, as cvt.rn), so only the f32 summation order differs; with mma.sync and with
    warpgroup MMA (beta != 0 there: C is read in the epilogue, and an unwritten element keeps its
    old value). test_cuda_tf32_exact_gpu.py checks the rounding itself, bit for bit."""
    kernel = load_example("matmul_tf32.phk")
    rng = np.random.default_rng(11)
    ran = 0
    for dims in MATMUL_DIMS:
        for point in (
            {"TILE_M": 64, "TILE_N": 64, "TILE_K": 16},
            {"TILE_M": 256, "TILE_N": 64, "TILE_K": 64},
        ):
            ran += _check(kernel, dims, point, Schedule(), MATMUL_TOL, rng, {"alpha": 0.75, "beta": 0.0})
    for dims in [*MATMUL_DIMS, {"M": 300, "N": 260, "K": 200}]:
        for point, schedule in TF32_WGMMA:
            ran += _check(kernel, dims, point, schedule, MATMUL_TOL, rng, {"alpha": 0.75, "beta": 0.5})
    assert ran == 18, ran  # of 22 points: 4 of the warpgroup ones do not fit the ragged shapes


# TF32 on the TMA ring by role swap (mainloops/tma_ws/tf32.py): C^T = B^T A^T, operands rounded by the copies
# (TFLOAT32 maps), B^T's fragments loaded into registers, C^T staged into acc after the loop.
# Two warpgroups along n (256 x 128, 128 x 128), one (64 x 64, 128 threads), and two along m
# (256 x 64: each warpgroup's wgmma takes 128 of the 256 rows).
TF32_TMA = [
    ({"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True, stages=4, order="grouped", tma=True)),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule(wgmma=True, stages=6, tma=True)),
    (
        {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32},
        Schedule(wgmma=True, stages=4, order="grouped", group=3, tma=True),
    ),
    ({"TILE_M": 256, "TILE_N": 64, "TILE_K": 32}, Schedule(wgmma=True, stages=3, tma=True)),
]
# ragged M, N and K (N in 16-byte rows, which the tensor maps need); K = 1000 wraps the ring
TF32_TMA_DIMS = [
    {"M": 256, "N": 384, "K": 128},
    {"M": 203, "N": 316, "K": 136},
    {"M": 77, "N": 1000, "K": 264},
    {"M": 300, "N": 260, "K": 1000},
]


@pytest.mark.parametrize("case", range(len(TF32_TMA)))
def test_tf32_tma_ring_equals_interpreter(case):
    """Every point compiles (none of these is pruned) and equals the interpreter, beta != 0."""
    kernel = load_example("matmul_tf32.phk")
    point, schedule = TF32_TMA[case]
    rng = np.random.default_rng(40 + case)
    for dims in TF32_TMA_DIMS:
        assert _check(kernel, dims, point, schedule, MATMUL_TOL, rng, {"alpha": 0.75, "beta": 0.5})


def test_tf32_opt_in_runs_on_warpgroup_mma():
    """The kernel-wide TF32 opt-in (matmul.phk, compile_kernel(tf32=True)) on warpgroup MMA."""
    from compiler.cuda.launch import run_kernel_gpu

    kernel = load_example("matmul.phk")
    rng = np.random.default_rng(12)
    ring, tma = Schedule(wgmma=True), Schedule(wgmma=True, stages=4, tma=True)
    cases = [  # the register-staged ring; the TMA ring by role swap (TILE_N = 64 per warpgroup)
        ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, (ring, tma)),
        ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}, (ring,)),
        ({"TILE_M": 256, "TILE_N": 64, "TILE_K": 32}, (tma,)),  # two warpgroups along m
    ]
    for point, schedules in cases:
        b = binding.bind(kernel, {"M": 256, "N": 512, "K": 192}, None, point)
        arrays, scalars = random_inputs(kernel, dict(b.env), rng)
        ref = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, ref, scalars)
        for schedule in schedules:
            got = run_kernel_gpu(
                kernel, b, {n: a.copy() for n, a in arrays.items()}, scalars, tf32=True, schedule=schedule
            )
            assert rel_err(got["C"], ref["C"]) <= TF32_TOL, (point, schedule)


# TF32 (the kernel-wide opt-in, `compile_kernel(..., tf32=True)`): operands rounded to 10-bit
# mantissas (relative 2^-11 each), products and sums in f32. Against the exact-f32 interpreter a
# random sum of K such products is off by about 2^-11 relative; 2e-3 leaves room for that and for
# attention's softmax, never for a wrong element.
TF32_TOL = 2e-3
TF32_CASES = [
    (
        "matmul.phk",
        {"M": 256, "N": 384, "K": 128},
        [{"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, {"TILE_M": 64, "TILE_N": 128, "TILE_K": 8}],
    ),
    (
        "matmul_plain.phk",
        {"M": 203, "N": 317, "K": 136},
        [{"TILE_M": 128, "TILE_N": 128, "TILE_K": 16}, {"TILE_M": 64, "TILE_N": 32, "TILE_K": 32}],
    ),
    (
        "flash_attention.phk",
        {"Nq": 203, "Nk": 331},
        # BC = 128 holds 100 values a thread, past TF32 attention's register budget (96): pruned
        [{"BR": 128, "BC": 64}, {"BR": 64, "BC": 64}, {"BR": 64, "BC": 32}],
    ),
    ("causal_attention.phk", {"N": 299}, [{"BR": 128, "BC": 64}, {"BR": 64, "BC": 64}]),
]


@pytest.mark.parametrize("name,dims,points", TF32_CASES, ids=[c[0] for c in TF32_CASES])
def test_tf32_examples_equal_interpreter(name, dims, points):
    from compiler.cuda.launch import run_kernel_gpu

    kernel = load_example(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 7)
    for point in points:
        b = binding.bind(kernel, dims, None, point)
        arrays, scalars = random_inputs(kernel, dict(b.env), rng)
        scalars.update({"scale": 0.125} if "attention" in name else {})
        ref = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, ref, scalars)
        gpu_in = {n: a.copy() for n, a in arrays.items()}
        for n in walk.stored_tensors(kernel):
            if n != "C":  # matmul reads C (beta * C_old)
                gpu_in[n][...] = np.nan
        got = run_kernel_gpu(kernel, b, gpu_in, scalars, tf32=True)
        for n in walk.stored_tensors(kernel):
            err = rel_err(got[n], ref[n])
            assert err <= TF32_TOL, (name, point, n, err)


def test_tuner_searches_the_schedules_of_a_tensor_core_kernel(tmp_path, monkeypatch):
    """The default tuner on a tensor-core kernel measures warpgroup MMA and mma.sync schedules
    beside the tile values, keeps the fastest, and the cache gives back its schedule."""
    from compiler.cuda.tuning import autotune

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    kernel = load_example("matmul_bf16.phk")
    dims = {"M": 512, "N": 512, "K": 512}
    points = [{"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}]
    first = autotune.tune(kernel, dims, points=points)
    measured = {dict(p)["schedule"] for p, _ in first.timings}
    assert any("wgmma" in s for s in measured) and any("wgmma" not in s for s in measured), measured
    assert first.best_ms == min(ms for _, ms in first.timings)
    again = autotune.tune(kernel, dims, points=points)
    assert again.cached and (again.best, again.schedule) == (first.best, first.schedule)
