"""On the GPU: the TMA-store epilogue (compiler/cuda/mainloops/tma_ws/store.py) equals the reference
interpreter at every point of tma_store_cases, ragged edges included (the copy engine clips the boxes), one
and two consumer warpgroups, f32, bf16 and f16 outputs and a 3-D (batched) map. Outputs are poisoned (NaN)
before the run, so an element left unwritten fails.

Tolerances follow from the operation:
- f32 outputs: the products of 16-bit operands are exact in f32 and both sides sum in f32 in
  another order: norm-wise ~ sqrt(K) 2^-24, held to 1e-5 as the other tensor-core matmul tests;
- 16-bit outputs, element by element: the f32 values before the conversion differ by at most
  (K + 2) u (sum_k |a_ik b_kj| |alpha| + |bias_j|), u = 2^-24 (any order of the K-term sum, the
  scale and the bias add), and both sides then round to the output type, so the results differ
  by at most that plus one unit in the last place of the output (2^-7 |x| for bf16, 2^-10 |x|
  for f16) and, for f16, its smallest subnormal step 2^-24."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import random_inputs, rel_err
from tma_store_cases import CASES, POINTS, kernel, points_of

from compiler.frontend import binding, walk
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

F32_TOL = 1e-5
ULP = {"bf16": 2.0**-7, "f16": 2.0**-10}
U = 2.0**-24


def _magnitude(name: str, arrays: dict, scalars: dict) -> np.ndarray:
    """sum_k |a_ik b_kj| |alpha| + |bias_j| of each output element, in float64."""
    a, b = (np.abs(np.asarray(arrays[n], np.float64)) for n in ("AB" if "A" in arrays else "XW"))
    mag = np.matmul(a, b) * abs(scalars.get("alpha", 1.0))
    if "bias" in arrays:
        mag += np.abs(np.asarray(arrays["bias"], np.float64))
    return mag


def check_against_interpreter(name, dims, point, schedule, rng) -> None:
    """One point of a tma_store_cases kernel on the GPU against the interpreter (the tolerances above);
    also the persistent grid's cases (test_persistent_gpu.py), with or without the TMA store."""
    from compiler.cuda.compiled import compile_kernel
    from compiler.cuda.launch import run_kernel_gpu
    from compiler.cuda.target import device_capability

    k = kernel(name)
    b = binding.bind(k, dims, None, point)
    compiled = compile_kernel(k, b, schedule=schedule, cc=device_capability())
    stored = any(m.param.startswith("tms_") for m in compiled.tensor_maps)
    assert stored == schedule.tma_store  # the store took it (where asked)
    arrays, scalars = random_inputs(k, dict(b.env), rng)
    want = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(k, b, want, scalars)
    gpu_in = {n: a.copy() for n, a in arrays.items()}
    (out,) = walk.stored_tensors(k)
    gpu_in[out][...] = np.nan
    got = run_kernel_gpu(k, b, gpu_in, scalars, schedule=schedule)[out]
    dtype = next(p.dtype for p in k.tensors if p.name == out)
    if dtype == "f32":
        assert rel_err(got, want[out]) <= F32_TOL, (name, dims, point, schedule)
        return
    got, ref = np.asarray(got, np.float64), np.asarray(want[out], np.float64)
    assert np.isfinite(got).all(), "non-finite output (unwritten element?)"
    K = dims["K"]
    rounding = ULP[dtype] * np.maximum(np.abs(got), np.abs(ref))
    bound = (K + 2) * U * _magnitude(name, arrays, scalars) + rounding + U
    worst = np.max(np.abs(got - ref) - bound)
    assert worst <= 0, (name, dims, point, schedule, worst)


@pytest.mark.parametrize("case", range(len(POINTS)))
@pytest.mark.parametrize("name,dims_list", CASES, ids=[c[0] for c in CASES])
def test_tma_store_equals_interpreter(name, dims_list, case):
    point, schedule = points_of(name)[case]
    rng = np.random.default_rng(1000 + case)
    for dims in dims_list:
        check_against_interpreter(name, dims, point, schedule, rng)
