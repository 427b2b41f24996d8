"""The leaves of real-size cluster programs, compiled to CUDA and run on a GPU one launch at a
time through the sequential plan, give the kernel's result (checked against numpy in float64).

These are the examples with their own @cluster values (super-tiles of 4096 and 1024), so the
leaves are the ones the runtime ships, at the sizes it ships them."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cluster.build import compile_cluster
from compiler.cluster.sequential import run_program
from tests.cluster.helpers import example

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(11)


_MODULES: dict[str, object] = {}  # PTX -> loaded module, kept alive for the test session


def gpu_runner(kernel, binding, arrays, scalars) -> None:
    """Run one leaf launch on the GPU in place: compile_kernel's PTX, launched with cupy."""
    import cupy

    from compiler.cuda.compiled import compile_kernel

    compiled = compile_kernel(kernel, binding)
    module = _MODULES.get(compiled.ptx)
    if module is None:
        module = _MODULES[compiled.ptx] = cupy.cuda.function.Module()
        module.load(compiled.ptx.encode())
    fn = module.get_function(compiled.entry)
    if compiled.shared_bytes > 48 * 1024:
        cupy.cuda.driver.funcSetAttribute(fn.ptr, 8, compiled.shared_bytes)  # max dynamic shared memory
    scalar_types = dict(compiled.scalars)
    device = {name: cupy.asarray(np.ascontiguousarray(a)) for name, a in arrays.items()}
    args = [
        (np.float32 if scalar_types[name] == "f32" else np.int32)(scalars[name])
        if name in scalar_types
        else device[name]
        for name in compiled.params
    ]
    fn(compiled.grid, compiled.block, tuple(args), shared_mem=compiled.shared_bytes)
    for name, a in device.items():
        arrays[name][...] = cupy.asnumpy(a)


def _random(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_add():
    n = 4 * 1048576
    tensors = {"a": _random(n), "b": _random(n), "c": np.zeros(n, np.float32)}
    program = compile_cluster(example("add"), {"N": n})
    run_program(program, tensors, {}, runner=gpu_runner)
    np.testing.assert_array_equal(tensors["c"], tensors["a"] + tensors["b"])  # one f32 add: exact


@pytest.mark.parametrize(
    ("name", "n", "scalars"),
    [
        pytest.param(
            "matmul", 8192, {"alpha": 1.5, "beta": -0.5}, marks=pytest.mark.slow
        ),  # 2 x 2 units of init + 2 steps of K = 4096
        ("matmul_plain", 2048, {}),  # 4 x 4 units of init + 4 steps of K = 512
    ],
)
def test_matmul(name, n, scalars):
    a, b, c = _random(n, n), _random(n, n), _random(n, n)
    tensors = {"A": a, "B": b, "C": c.copy()}
    program = compile_cluster(example(name), {"M": n, "N": n, "K": n})
    run_program(program, tensors, scalars, runner=gpu_runner)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    if scalars:
        expected = scalars["alpha"] * expected + scalars["beta"] * c
    # f32 sums of n products of N(0,1) values: each |entry| ~ sqrt(n), rounding error grows like
    # sqrt(n) * 2^-24 * sqrt(n) per entry; 1e-3 relative to sqrt(n) leaves a wide margin.
    np.testing.assert_allclose(tensors["C"], expected, rtol=0, atol=1e-3 * np.sqrt(n))


def test_flash_attention():
    nq, nk, d = 4096, 2048, 64
    q, k, v = _random(nq, d), _random(nk, d), _random(nk, d)
    tensors = {"Q": q, "K": k, "V": v, "O": np.zeros((nq, d), np.float32)}
    program = compile_cluster(example("flash_attention"), {"Nq": nq, "Nk": nk})
    assert len(program.units) == 4
    run_program(program, tensors, {"scale": 0.125}, runner=gpu_runner)
    s = 0.125 * q.astype(np.float64) @ k.astype(np.float64).T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    expected = (p / p.sum(axis=1, keepdims=True)) @ v
    # outputs are convex combinations of N(0,1) values; f32 exp and sums keep ~1e-6 relative
    # error per term over 2048 keys, so 1e-4 absolute is a safe bound.
    np.testing.assert_allclose(tensors["O"], expected, rtol=0, atol=1e-4)
