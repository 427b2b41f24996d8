"""Anchors: a well-kept library doing a case's whole problem on one device, data in memory.

CPU: numpy (its BLAS for the matrix products). GPU: cupy.matmul (cuBLAS SGEMM), torch
scaled_dot_product_attention in f32 on a [1, 1, Nq, 64] batch, cupy.add into a preallocated
output; GPU timings use CUDA events around the call, after a warm-up, inputs already on the device.
Each anchor returns the median of `repeat` timings in seconds.
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.cluster_cases import Problem
from benchmarks.gpu_timing import cuda_median_s


def _median_s(fn, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_anchor(problem: Problem, arrays: dict[str, np.ndarray], repeat: int = 5) -> float:
    s = dict(problem.scalars)
    if problem.kind == "matmul":
        a, b, c = arrays["A"], arrays["B"], arrays["C"]
        out = np.empty_like(c)

        def run():
            np.matmul(a, b, out=out)
            np.multiply(out, np.float32(s["alpha"]), out=out)
            np.add(out, np.float32(s["beta"]) * c, out=out)

    elif problem.kind == "attention":
        q, k, v = arrays["Q"], arrays["K"], arrays["V"]
        scale = np.float32(s["scale"])

        def run():
            logits = (q @ k.T) * scale
            logits -= logits.max(axis=1, keepdims=True)
            np.exp(logits, out=logits)
            out = logits @ v
            out /= logits.sum(axis=1, keepdims=True)
            return out

    else:
        a, b = arrays["a"], arrays["b"]
        out = np.empty_like(a)

        def run():
            np.add(a, b, out=out)

    return _median_s(run, warmup=1, repeat=repeat)


def cpu_brand() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_missing() -> str | None:
    """Why the GPU cases cannot run here, or None."""
    try:
        import cupy
    except ImportError as err:
        return f"no GPU: cupy is not importable ({err})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no GPU: CUDA finds no device"
    except Exception as err:  # cupy raises its own CUDA errors where there is no driver
        return f"no GPU: CUDA finds no device ({type(err).__name__})"
    return None


def gpu_name() -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_anchor(problem: Problem, arrays: dict[str, np.ndarray]) -> tuple[float, str]:
    """(seconds, which library) for the whole problem on GPU 0."""
    import cupy

    s = dict(problem.scalars)
    if problem.kind == "matmul":
        a, b, c = (cupy.asarray(arrays[n]) for n in "ABC")
        out = cupy.empty_like(c)

        def run():
            cupy.matmul(a, b, out=out)
            cupy.multiply(out, s["alpha"], out=out)
            cupy.add(out, s["beta"] * c, out=out)

        return cuda_median_s(run), "cupy.matmul (cuBLAS SGEMM f32)"
    if problem.kind == "attention":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # an f32 anchor for an f32 kernel
        q, k, v = (torch.from_numpy(arrays[n]).cuda()[None, None] for n in "QKV")

        def run():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=s["scale"])

        seconds = cuda_median_s(run)
        return seconds, "torch scaled_dot_product_attention f32"
    a, b = cupy.asarray(arrays["a"]), cupy.asarray(arrays["b"])
    out = cupy.empty_like(a)
    return cuda_median_s(lambda: cupy.add(a, b, out=out)), "cupy.add"
