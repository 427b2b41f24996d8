"""Speed of the reference interpreter (the CPU backend) against numpy on the same machine.

Target: the seed matmul (examples/matmul.phk) at 1024^3 f32 with its default tile values in under
2 s on a 2-core CPU. Absolute times depend on the machine, so each benchmark records the ratio
to the equivalent plain-numpy computation measured in the same run (`extra_info`).

    PYTHONPATH=. .venv/bin/pytest benchmarks/test_interp_matmul.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.interp_bench import best_of as _best_of
from benchmarks.interp_bench import example_kernel as _kernel
from benchmarks.interp_bench import record_ratio as _record
from compiler.frontend.binding import bind
from compiler.interp import interpreter as interp
from compiler.interp.interpreter import run_kernel


@pytest.mark.parametrize("loop", ["fused", "iterated"])
def test_matmul_1024_default_tiles(benchmark, monkeypatch, loop):
    """`fused`: the K-loop runs as one GEMM (compiler/interp/fusion.py); `iterated`: one thin GEMM per
    iteration (K/TILE_K = 256 of them), the path every loop of another shape takes."""
    if loop == "iterated":
        monkeypatch.setattr(interp, "match_dot_loop", lambda stmt: None)
    n = 1024
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(3))
    kernel = _kernel("matmul")
    binding = bind(kernel, {"M": n, "N": n, "K": n})
    assert dict(binding.tile_values) == {"TILE_M": 32, "TILE_N": 32, "TILE_K": 4}
    out = c.copy()

    def run_once():
        out[...] = c
        run_kernel(kernel, binding, {"A": a, "B": b, "C": out}, {"alpha": 1.5, "beta": 0.5})

    benchmark.pedantic(run_once, rounds=3, iterations=1, warmup_rounds=1)
    _record(benchmark, _best_of(lambda: 1.5 * (a @ b) + 0.5 * c))
    # 1024-term f32 dot products of unit normals: |error| ~ sqrt(K) * eps * sum|a||b| ~ 1e-3
    np.testing.assert_allclose(out, 1.5 * (a @ b) + 0.5 * c, rtol=0, atol=5e-2)
    benchmark.extra_info["target_s"] = 2.0
