"""On the GPU: every example at several tile points equals the reference interpreter, on random
shapes with ragged edges. Tolerances (relative to the reference's norm, per operation):
- add, axpby, transpose: one rounding per element at most, so 1e-6;
- matmul: f32 sums of up to K products in another order than numpy's, relative error ~ sqrt(K)
  * 2^-24; 1e-5 leaves room for K <= 600;
- softmax, layernorm, attention: fast-math expf/sqrtf/division (a few ulp each) plus reordered
  sums; 3e-5.
Outputs are poisoned (NaN) before the run so an unwritten element fails.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from cuda_cases import load_example, random_inputs, rel_err

from compiler.cuda.schedule import SIMT_DOUBLE_BUFFER, SIMT_WIDE_BLOCK
from compiler.cuda.tuning import autotune
from compiler.frontend import binding, walk
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

TOL = {
    "add.phk": 1e-6,
    "axpby.phk": 1e-6,
    "transpose.phk": 0.0,
    "matmul.phk": 1e-5,
    "matmul_plain.phk": 1e-5,
    "softmax.phk": 3e-5,
    "layernorm.phk": 3e-5,
    "flash_attention.phk": 3e-5,
    "causal_attention.phk": 3e-5,
}

CASES = [
    ("add.phk", {"N": 1000003}, [{"BLOCK": 16}, {"BLOCK": 256}, {"BLOCK": 4096}, {"BLOCK": 1024}]),
    (
        "axpby.phk",
        {"M": 301, "N": 517},
        [{}, {"BM": 64, "BN": 256}, {"BM": 16, "BN": 32}, {"BM": 32, "BN": 128}],
    ),
    ("transpose.phk", {"M": 333, "N": 190}, [{"T": 32}, {"T": 64}]),
    (
        "matmul.phk",
        {"M": 256, "N": 384, "K": 128},
        [
            {},
            {"TILE_M": 128, "TILE_N": 128, "TILE_K": 8},
            {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32},
            {"TILE_M": 128, "TILE_N": 64, "TILE_K": 4},
        ],
    ),
    (
        "matmul_plain.phk",
        {"M": 203, "N": 317, "K": 129},
        [{}, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 8}, {"TILE_M": 64, "TILE_N": 32, "TILE_K": 16}],
    ),
    ("softmax.phk", {"R": 37, "C": 1531}, [{}, {"BR": 16, "BC": 1024}, {"BR": 4, "BC": 256}]),
    ("layernorm.phk", {"R": 29, "C": 1100}, [{}, {"BR": 8, "BC": 1024}, {"BR": 2, "BC": 512}]),
    (
        "flash_attention.phk",
        {"Nq": 203, "Nk": 331},
        [{}, {"BR": 64, "BC": 64}, {"BR": 128, "BC": 128}, {"BR": 128, "BC": 32}],
    ),
    (
        "causal_attention.phk",
        {"N": 299},
        [{}, {"BR": 64, "BC": 64}, {"BR": 128, "BC": 64}, {"BR": 32, "BC": 128}],
    ),
]


@pytest.mark.parametrize("name,dims,points", CASES, ids=[c[0] for c in CASES])
def test_example_equals_interpreter(name, dims, points):
    _equals_interpreter(name, dims, points, None)


# the examples with a CUDA-core dot in a loop, at the tuner's second CUDA-core schedule
DOUBLE_BUFFERED = [c for c in CASES if len(autotune.cuda_core_schedules(load_example(c[0]))) > 1]


@pytest.mark.parametrize("name,dims,points", DOUBLE_BUFFERED, ids=[c[0] for c in DOUBLE_BUFFERED])
def test_example_double_buffered_equals_interpreter(name, dims, points):
    _equals_interpreter(name, dims, _fitting(name, dims, points, SIMT_DOUBLE_BUFFER), SIMT_DOUBLE_BUFFER)


# the examples with a CUDA-core dot in a loop on 128 threads (SIMT_WIDE_BLOCK: 16 x 8 register
# blocks at 128 x 128), at the points that fit (_fitting)
@pytest.mark.parametrize("name,dims,points", DOUBLE_BUFFERED, ids=[c[0] for c in DOUBLE_BUFFERED])
def test_example_on_wide_register_blocks_equals_interpreter(name, dims, points, monkeypatch):
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "1")  # schedule.wide_blocks_searched: the budget
    _equals_interpreter(name, dims, _fitting(name, dims, points, SIMT_WIDE_BLOCK), SIMT_WIDE_BLOCK)


def _fitting(name, dims, points, schedule) -> list[dict]:
    """The points the generator does not prune at `schedule` (shared memory, the loop's register
    budget: tests/cuda/test_simt_double_buffer.py checks that each compiles or is pruned with a
    reason); at least one must be left, or the case would test nothing."""
    from compiler.cuda.compiled import compile_kernel
    from compiler.frontend.diagnostics import CompileError

    kernel, left = load_example(name), []
    for point in points:
        try:
            compile_kernel(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)
        except CompileError as e:
            assert "is pruned" in e.message, e.message
            continue
        left.append(point)
    assert left, f"{name}: every point is pruned at {schedule}"
    return left


@pytest.mark.parametrize("point", [{"TILE_M": 128, "TILE_N": 256, "TILE_K": 8},
                                   {"TILE_M": 256, "TILE_N": 128, "TILE_K": 16}])
def test_matmul_on_8_by_16_blocks_of_256_threads_equals_interpreter(point, monkeypatch):
    """128 x 256 and 256 x 128 on 256 threads (8 x 16 and 16 x 8 per thread, held 256 with c_old:
    inside codegen.KERNEL_REGISTER_BUDGET with PHOBOS_CUDA_WIDE_BLOCKS=1), both schedules."""
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "1")
    for schedule in (None, SIMT_DOUBLE_BUFFER):
        _equals_interpreter("matmul.phk", {"M": 512, "N": 768, "K": 160}, [point], schedule)


def _equals_interpreter(name, dims, points, schedule):
    from compiler.cuda.launch import run_kernel_gpu

    kernel = load_example(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    stored = walk.stored_tensors(kernel)
    for point in points:
        b = binding.bind(kernel, dims, None, point)
        arrays, scalars = random_inputs(kernel, dict(b.env), rng)
        if "attention" in name:
            scalars["scale"] = 0.125
        ref = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, ref, scalars)
        gpu_in = {n: a.copy() for n, a in arrays.items()}
        for n in stored:
            if n not in ("C",):  # matmul reads C (beta * C_old); other outputs are poisoned
                gpu_in[n][...] = np.nan
        got = run_kernel_gpu(kernel, b, gpu_in, scalars, schedule=schedule)
        for n in stored:
            err = rel_err(got[n], ref[n])
            assert err <= TOL[name], (name, point, n, err)


@pytest.mark.parametrize("seed", range(8))
def test_random_shapes_with_ragged_edges(seed):
    """matmul_plain, softmax and flash attention on random sizes that are not tile multiples;
    seeds 6 and 7: matmul_plain at the double-buffered CUDA-core schedule."""
    from compiler.cuda.launch import run_kernel_gpu

    rng = np.random.default_rng(1000 + seed)
    names = ("matmul_plain.phk", "softmax.phk", "flash_attention.phk")
    name = names[seed % 3] if seed < 6 else "matmul_plain.phk"
    kernel = load_example(name)
    if name == "matmul_plain.phk":
        dims = {
            "M": int(rng.integers(1, 300)),
            "N": int(rng.integers(1, 300)),
            "K": int(rng.integers(1, 200)),
        }
    elif name == "softmax.phk":
        dims = {"R": int(rng.integers(1, 64)), "C": int(rng.integers(1, 3000))}
    else:
        dims = {"Nq": int(rng.integers(1, 300)), "Nk": int(rng.integers(1, 300))}
    b = binding.bind(kernel, dims)
    arrays, scalars = random_inputs(kernel, dict(b.env), rng)
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars)
    got = run_kernel_gpu(kernel, b, arrays, scalars, schedule=SIMT_DOUBLE_BUFFER if seed >= 6 else None)
    for n in walk.stored_tensors(kernel):
        assert rel_err(got[n], ref[n]) <= TOL[name], (name, dims)


def test_autotune_picks_a_measured_point_and_reuses_the_cache(tmp_path, monkeypatch):
    from compiler.cuda.tuning import autotune

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    kernel = load_example("softmax.phk")
    dims = {"R": 2048, "C": 2048}
    first = autotune.tune(kernel, dims)
    assert not first.cached and first.best in [dict(p) for p, _ in first.timings]
    assert first.best_ms == min(ms for _, ms in first.timings)
    again = autotune.tune(kernel, dims)
    assert again.cached and again.best == first.best
    assert autotune.cached_choice(kernel, dims) == first.best
