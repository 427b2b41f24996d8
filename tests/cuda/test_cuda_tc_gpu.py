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
from cuda_cases import EXAMPLES, load_example, random_inputs

from compiler.cuda.schedule import Schedule
from compiler.frontend import binding, walk
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

MATMUL_POINTS = [
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, Schedule()),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 64}, Schedule(warps_m=2, stages=4, order="grouped")),
    ({"TILE_M": 128, "TILE_N": 64, "TILE_K": 64}, Schedule(warps_m=4, stages=2, threads=128)),
    ({"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, Schedule(warps_m=1, stages=3, order="grouped", group=3)),
]
MATMUL_DIMS = [{"M": 256, "N": 384, "K": 128}, {"M": 203, "N": 317, "K": 136}, {"M": 77, "N": 1000, "K": 264}]
MATMUL_TOL = 1e-5


def _rel_err(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all(), "non-finite output (unwritten element?)"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def _check(kernel, dims, point, schedule, tol, rng, scalars_override=None):
    from compiler.cuda.launch import run_kernel_gpu

    b = binding.bind(kernel, dims, None, point)
    arrays, scalars = random_inputs(kernel, dict(b.env), rng)
    scalars.update(scalars_override or {})
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars)
    gpu_in = {n: a.copy() for n, a in arrays.items()}
    for n in walk.stored_tensors(kernel):
        gpu_in[n][...] = np.nan
    got = run_kernel_gpu(kernel, b, gpu_in, scalars, schedule=schedule)
    for n in walk.stored_tensors(kernel):
        err = _rel_err(got[n], ref[n])
        assert err <= tol, (kernel.name, dims, point, schedule, n, err)


@pytest.mark.parametrize("name", ["matmul_bf16.phk", "matmul_f16.phk"])
@pytest.mark.parametrize("case", range(len(MATMUL_POINTS)))
def test_matmul_on_tensor_cores_equals_interpreter(name, case):
    kernel = load_example(name)
    point, schedule = MATMUL_POINTS[case]
    rng = np.random.default_rng(zlib.crc32(name.encode()) + case)
    for dims in MATMUL_DIMS:
        _check(kernel, dims, point, schedule, MATMUL_TOL, rng)


def attention_examples():
    return sorted(p.name for p in EXAMPLES.glob("*attention*_bf16.phk")) + sorted(
        p.name for p in EXAMPLES.glob("*attention*_f16.phk")
    )


@pytest.mark.parametrize("name", attention_examples())
def test_attention_on_tensor_cores_equals_interpreter(name):
    kernel = load_example(name)
    tol = 2e-3 if "bf16" in name else 5e-4
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dims_list = [{"N": 299, "D": 64}, {"N": 128, "D": 64}, {"N": 200, "D": 128}]
    fixed = {d.name for d in kernel.autotune.dims} if kernel.autotune else set()
    points = [{}, {"BR": 64, "BC": 64}, {"BR": 128, "BC": 64}, {"BR": 64, "BC": 128}]
    for dims in dims_list:
        dims = {k: v for k, v in _attention_dims(kernel, dims).items() if k not in fixed}
        for point in points:
            point = {k: v for k, v in point.items() if k in fixed}
            _check(kernel, dims, point, Schedule(), tol, rng, {"scale": 0.125})


def _attention_dims(kernel, dims):
    from cuda_cases import free_dims

    names = set(free_dims(kernel)) | {"D"}
    out = {}
    for n in names:
        if n in ("N", "Nq", "Nk"):
            out[n] = dims["N"] + (7 if n == "Nk" else 0)
        elif n == "D":
            out[n] = dims["D"]
        elif n == "H":
            out[n] = 3
    return out
