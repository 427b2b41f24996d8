"""On the GPU: the split loop (partial + combine kernels) equals the reference interpreter's one-CTA
loop for every G, bf16 / f16 / f32, odd S and split factors from 1 to the SM count and past it.
Tolerances as the attention tests (test_cuda_tc_gpu.py): 2e-3 bf16, 5e-4 f16, 1e-4 f32."""

from __future__ import annotations

import numpy as np
import pytest
from split_cases import DTYPES, GS, decode_inputs, decode_source, load

from compiler.cuda import split_launch, split_plan
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu
TOL = {"bf16": 2e-3, "f16": 5e-4, "f32": 1e-4}


def _factors(sms: int) -> list[int]:
    return [1, 2, 7, sms, 2 * sms]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", GS)
def test_split_decode_on_gpu_equals_the_interpreter(dtype, g):
    kernel = load(decode_source(dtype, g, "64, 128, 256"))
    sms = split_plan.device_sm_count()
    s = 64 * (2 * sms + 5) + 37  # odd S, enough key blocks for 2 * SM count chunks
    arrays, scalars = decode_inputs(dtype, g, s, np.random.default_rng(g))
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, {"G": g, "S": s}, None, {"BS": 64}), want, scalars)
    ran = 0
    for bs in (64, 128):
        b = binding.bind(kernel, {"G": g, "S": s}, None, {"BS": bs})
        for factor in _factors(sms):
            plan = split_plan.plan_split(kernel, b, factor=factor)
            try:
                launch = split_launch.compile_split(plan)
            except CompileError as e:
                assert "is pruned" in e.message, e.message
                break
            got = split_launch.run_split_gpu(launch, kernel, arrays, scalars)["O"]
            err = np.linalg.norm(got - want["O"]) / np.linalg.norm(want["O"])
            assert np.isfinite(got).all() and err < TOL[dtype], (dtype, g, bs, factor, err)
            ran += 1
    assert ran
