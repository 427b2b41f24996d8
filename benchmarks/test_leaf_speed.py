"""pytest-benchmark view of the CUDA leaves (GPU only): each leaf's launch time, with the anchor
measured in the same run recorded as a ratio in `extra_info`. benchmarks/leaf_bench.py is the
full report (all sizes, tuning, torch attention); this file gives the same numbers per launch.

    PYTHONPATH=. pytest benchmarks/test_leaf_speed.py --benchmark-only
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.gpu_timing import cuda_median_s
from compiler.frontend import binding
from compiler.frontend import load as frontend

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _gpu_missing() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() < 1
    except Exception:  # no cupy or no driver
        return True


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_missing(), reason="needs a GPU with cupy")]


def _sync_launch(compiled, arrays, scalars):
    import cupy

    from compiler.cuda.launch import launch

    launch(compiled, arrays, scalars)
    cupy.cuda.get_current_stream().synchronize()


def _record(benchmark, anchor_s: float) -> None:
    ours = benchmark.stats.stats.median
    benchmark.extra_info["anchor_s"] = anchor_s
    benchmark.extra_info["ratio_anchor_over_ours"] = anchor_s / ours


def test_matmul_4096_against_cublas(benchmark):
    import cupy

    from compiler.cuda.compiled import compile_kernel

    k = frontend.load_file(EXAMPLES / "matmul.phk").kernel()
    n = 4096
    c = compile_kernel(
        k, binding.bind(k, {"M": n, "N": n, "K": n}, None, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 8})
    )
    rng = cupy.random.default_rng(0)
    A, B = (rng.standard_normal((n, n), dtype=cupy.float32) for _ in range(2))
    C = cupy.zeros((n, n), cupy.float32)
    benchmark.pedantic(
        _sync_launch,
        args=(c, {"A": A, "B": B, "C": C}, {"alpha": 1.0, "beta": 0.0}),
        rounds=10,
        warmup_rounds=2,
    )
    ref = cupy.empty_like(C)
    _record(benchmark, cuda_median_s(lambda: cupy.matmul(A, B, out=ref)))


def test_add_2_28_against_cupy_add(benchmark):
    import cupy

    from compiler.cuda.compiled import compile_kernel

    k = frontend.load_file(EXAMPLES / "add.phk").kernel()
    n = 2**28
    c = compile_kernel(k, binding.bind(k, {"N": n}, None, {"BLOCK": 1024}))
    rng = cupy.random.default_rng(1)
    a, b = (rng.standard_normal(n, dtype=cupy.float32) for _ in range(2))
    out = cupy.empty_like(a)
    benchmark.pedantic(_sync_launch, args=(c, {"a": a, "b": b, "c": out}, {}), rounds=20, warmup_rounds=3)
    _record(benchmark, cuda_median_s(lambda: cupy.add(a, b, out=out)))
