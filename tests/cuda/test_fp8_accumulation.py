"""The fp8 tensor cores' accumulation (fp8_accumulation.py), with no GPU: the model reproduces
what the H100 measured of the one-chain k loop (benchmarks/results/h100-2026-12-07/
gpu-tests.log: the worst ratio of error to the f32-sum tolerance in each failed case, printed by
the old test), and the GPU tests' tolerance, derived from the promoted accumulation, takes the
promoted result and refuses the one-chain one on the GPU tests' own inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from fp8_accumulation import f32_difference_bound, gpu_result, rounded_bound
from fp8_cases import EXAMPLE, per_tensor_text
from fp8_cases import inputs as _inputs

from compiler.frontend import binding
from compiler.frontend.load import load_text
from compiler.interp import interpreter as interp

# (format, C, (M, N, K), tile point, per-tensor (sa, sb) or None, ratio the H100 showed)
MEASURED = [
    ("e4m3", "f32", (512, 512, 1024), {"TILE_M": 128, "TILE_N": 128}, None, 3.0190165722407416),
    ("e5m2", "f32", (300, 520, 1000), {"TILE_M": 128, "TILE_N": 256}, None, 1.8682930399705542),
    ("e4m3", "f32", (384, 512, 512), {"TILE_M": 128, "TILE_N": 256}, (0.75, 3.0), 5.983287392060107),
]


def _interpreted(fmt, out, dims, point, per_tensor):
    m, n, k = dims
    text = per_tensor_text(EXAMPLE) if per_tensor else EXAMPLE
    text = text.replace("e4m3", fmt).replace("C: tensor<bf16>", f"C: tensor<{out}>")
    kernel = load_text(text, "matmul_fp8.phk").kernels[0]
    arrays = _inputs(fmt, m, n, k, ml_dtypes.bfloat16 if out == "bf16" else np.float32)
    scalars = {}
    if per_tensor:
        arrays.pop("SA"), arrays.pop("SB")
        scalars = {"sa": per_tensor[0], "sb": per_tensor[1]}
        scale = np.full((m, n), np.float32(per_tensor[0]) * np.float32(per_tensor[1]), np.float32)
    else:
        scale = arrays["SA"][:, None] * arrays["SB"][None, :]
    ref = {name: a.copy() for name, a in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, {"M": m, "N": n, "K": k}, None, point), ref, scalars)
    return arrays, scale, ref["C"].astype(np.float64)


@pytest.mark.parametrize(("fmt", "out", "dims", "point", "per_tensor", "measured"), MEASURED)
def test_the_model_reproduces_the_h100s_one_chain_error(fmt, out, dims, point, per_tensor, measured):
    arrays, scale, ref = _interpreted(fmt, out, dims, point, per_tensor)
    got = gpu_result(arrays["A"], arrays["Bt"], scale, chain_tiles=True).astype(np.float64)
    mag = np.abs(arrays["A"].astype(np.float64)) @ np.abs(arrays["Bt"].astype(np.float64)).T
    if per_tensor:
        mag *= per_tensor[0] * per_tensor[1]
    else:  # as the old test scaled it: in float64
        mag *= arrays["SA"][:, None].astype(np.float64) * arrays["SB"][None, :]
    old_tolerance = 2 * (dims[2] + 2) * 2.0**-24 * mag  # what the old GPU test allowed
    assert float(np.max(np.abs(got - ref) / old_tolerance)) == pytest.approx(measured, rel=1e-9)


BF16_CASE = ("e4m3", "bf16", (300, 520, 1000), {"TILE_M": 64, "TILE_N": 128}, None)


@pytest.mark.parametrize(("fmt", "out", "dims", "point", "per_tensor"),
                         [c[:5] for c in MEASURED] + [BF16_CASE])
def test_the_tolerance_takes_the_promoted_sum_and_refuses_the_one_chain(fmt, out, dims, point, per_tensor):
    arrays, scale, ref = _interpreted(fmt, out, dims, point, per_tensor)
    bound = f32_difference_bound(arrays["A"], arrays["Bt"], scale, fp8_mma=True)
    if out == "bf16":
        bound = rounded_bound(bound, ref, 2.0**-8)

    def worst(chain: bool) -> float:
        got = gpu_result(arrays["A"], arrays["Bt"], scale, chain_tiles=chain)
        if out == "bf16":
            got = got.astype(ml_dtypes.bfloat16)
        return float(np.max(np.abs(got.astype(np.float64) - ref) / bound))

    assert worst(False) <= 1.0
    assert worst(True) > 1.0
