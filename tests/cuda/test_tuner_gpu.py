"""On the GPU: the tuner's first-call machinery (the candidates' PTX loaded on several threads at
once, inputs drawn on the device) gives the same loaded functions and values as the plain path."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from cuda_cases import load_example

from compiler.cuda import launch
from compiler.cuda.schedule import DEFAULT, WGMMA_DEEP_PROBE
from compiler.cuda.tuning import pool as compile_pool
from compiler.cuda.tuning import timing as tune_timing

pytestmark = pytest.mark.gpu


def test_candidates_loaded_on_threads_launch_like_one_loaded_alone(tmp_path, monkeypatch):
    import cupy
    import ml_dtypes

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    kernel = load_example("matmul_bf16.phk")
    dims = {"M": 256, "N": 384, "K": 128}
    tasks = [(kernel, dims, {"TILE_M": 64, "TILE_N": tn, "TILE_K": 32}, s, False, 90)
             for tn in (64, 128) for s in (DEFAULT, WGMMA_DEEP_PROBE)]
    built = [compiled for compiled, why in compile_pool.build_all(tasks, workers=2)]
    assert all(built)
    assert launch.load_all(built, threads=4) == [None] * len(built)
    device = cupy.cuda.Device().id
    assert all((device, c.ptx, c.entry) in launch._functions for c in built)  # loaded: no JIT left
    rng = np.random.default_rng(3)
    a16 = rng.standard_normal((256, 128), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b16 = rng.standard_normal((128, 384), dtype=np.float32).astype(ml_dtypes.bfloat16)
    bits = {"A": cupy.asarray(a16.view(np.uint16)), "B": cupy.asarray(b16.view(np.uint16))}
    expected = a16.astype(np.float64) @ b16.astype(np.float64)  # exact products, f32 sums of 128
    for compiled in built:
        c = cupy.full((256, 384), np.nan, cupy.float32)  # an unwritten element fails
        launch.launch(compiled, {**bits, "C": c}, {})
        got = cupy.asnumpy(c)
        assert np.linalg.norm(got - expected) <= 1e-5 * np.linalg.norm(expected)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "e4m3"])
def test_tuning_inputs_are_drawn_in_each_storage_type(dtype):
    import cupy

    param = SimpleNamespace(name="x", dtype=dtype, dims=(64, "N"))
    kernel = SimpleNamespace(tensors=(param,), scalars=())  # all tuning_inputs reads of a kernel
    arrays, _ = tune_timing.tuning_inputs(kernel, {"N": 96})
    x = arrays["x"]
    assert isinstance(x, cupy.ndarray) and x.shape == (64, 96)
    storage = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32, "e4m3": np.uint8}
    assert x.dtype == storage[dtype]
    host = cupy.asnumpy(x)
    if dtype == "bf16":  # finite normal draws, not all equal
        import ml_dtypes

        values = host.view(ml_dtypes.bfloat16).astype(np.float32)
        assert np.isfinite(values).all() and 0.5 < values.std() < 2.0
    elif dtype in ("f32", "f16"):
        assert np.isfinite(host).all() and 0.5 < host.astype(np.float32).std() < 2.0
    elif dtype == "i32":
        assert host.min() >= 0 and host.max() < 8
