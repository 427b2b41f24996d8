"""Speed of the reference interpreter on attention and a bandwidth-bound kernel, as ratios to the
same computation in plain numpy measured in the same run (see test_interp_matmul.py).

    PYTHONPATH=. .venv/bin/pytest benchmarks/test_interp_kernels.py --benchmark-only
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.interp_bench import best_of as _best_of
from benchmarks.interp_bench import example_kernel as _kernel
from benchmarks.interp_bench import record_ratio as _record
from compiler.frontend.binding import bind
from compiler.interp.interpreter import run_kernel


@pytest.mark.parametrize("causal", [False, True])
def test_attention_4096(benchmark, causal):
    n, d = 4096, 64
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))
    name = "causal_attention" if causal else "flash_attention"
    kernel = _kernel(name)
    dims = {"N": n} if causal else {"Nq": n, "Nk": n}
    binding = bind(kernel, dims)
    o = np.zeros_like(q)
    tensors = {"Q": q, "K": k, "V": v, "O": o}
    benchmark.pedantic(lambda: run_kernel(kernel, binding, tensors, {"scale": 0.125}),
                       rounds=3, iterations=1, warmup_rounds=1)

    def reference():
        s = 0.125 * (q @ k.T)
        if causal:
            s = np.where(np.tri(n, dtype=bool), s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)) @ v

    _record(benchmark, _best_of(reference, repeat=3))
    np.testing.assert_allclose(o, reference(), rtol=0, atol=1e-4)


def test_add_16m_elements(benchmark):
    n = 1 << 24
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    kernel = _kernel("add")
    binding = bind(kernel, {"N": n}, tile_values={"BLOCK": 4096})
    benchmark.pedantic(lambda: run_kernel(kernel, binding, {"a": a, "b": b, "c": c}, {}),
                       rounds=3, iterations=1, warmup_rounds=1)
    _record(benchmark, _best_of(lambda: np.add(a, b, out=c)))
    np.testing.assert_array_equal(c, a + b)
