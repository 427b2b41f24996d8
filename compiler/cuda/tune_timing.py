"""What the tuner times with, and how: inputs made on the device, and a launch timer that stops
early for a candidate that is clearly slower than the best so far.

First-call time matters (issue 36: seconds, not a minute), and two costs grew with the problem
size rather than with the number of candidates: random inputs drawn on the host and copied over
(three 16384^2 operands are 3 GiB of host work), and seven timed launches of every candidate,
losers included (12.6 ms each at 16384^3). Inputs are now drawn by the GPU, and a candidate's
first timed launch screens it: slower than SCREEN_RATIO x the best, it has lost, and that launch
is its time; otherwise it is timed in full, with fewer repeats for long launches, whose median
varies less."""

from __future__ import annotations

import numpy as np

from compiler.frontend import ir

SCREEN_RATIO = 1.3  # a first launch 30% over the best is a loser: clock noise is a few percent
REPEAT_BUDGET_MS = 25.0  # repeats of one candidate's full timing aim at about this much GPU time
MIN_REPEAT, MAX_REPEAT = 3, 7


def tuning_inputs(kernel: ir.Kernel, env: dict[str, int], seed: int = 0):
    """(device arrays, scalars) for timing `kernel` bound by `env`: standard normal values (small
    integers for i32), in each tensor's storage type (bf16 as its 16-bit pattern, fp8 as its
    byte). Drawn on the GPU; fp8 and other types the GPU cannot draw are drawn on the host."""
    import cupy

    state = cupy.random.RandomState(seed)
    arrays = {}
    for p in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else env[d] for d in p.dims)
        arrays[p.name] = _device_values(state, p.dtype, shape)
        if arrays[p.name] is None:
            arrays[p.name] = cupy.asarray(_host_values(np.random.default_rng(seed), p.dtype, shape))
    scalars = {p.name: (0.5 if p.dtype == "f32" else 1) for p in kernel.scalars}
    return arrays, scalars


def _device_values(state, dtype: str, shape: tuple[int, ...]):
    import cupy

    if dtype == "i32":
        return state.randint(0, 8, size=shape, dtype=cupy.int32)
    if dtype not in ("f32", "f16", "bf16"):
        return None
    values = state.standard_normal(shape, dtype=cupy.float32)
    if dtype == "f16":
        return values.astype(cupy.float16)
    if dtype == "bf16":  # round to nearest even on the 16 high bits (no NaN in normal draws)
        bits = values.view(cupy.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(cupy.uint16)
    return values


def _host_values(rng, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    from common import dtypes

    if dtypes.get(dtype).kind in ("int", "uint", "bool"):
        return rng.integers(0, 2 if dtype == "bool" else 8, size=shape).astype(dtypes.numpy_dtype(dtype))
    host = rng.standard_normal(shape, dtype=np.float32)
    if dtype in ir.FP8:  # fp8 travels as its byte
        return host.astype(dtypes.TABLE[dtype].numpy()).view(np.uint8)
    return host.astype(dtypes.numpy_dtype(dtype))


def time_launch(compiled, arrays, scalars, beat: float | None = None) -> float:
    """Milliseconds of one launch, timed with CUDA events after one warm-up launch. With `beat`
    (the best time so far), a first timed launch over SCREEN_RATIO x `beat` is the answer; the
    others are the median of MIN_REPEAT..MAX_REPEAT launches (fewer for long ones)."""
    from compiler.cuda.launch import launch

    launch(compiled, arrays, scalars)
    first = _timed(compiled, arrays, scalars)
    if beat is not None and first > SCREEN_RATIO * beat:
        return first
    repeat = int(min(MAX_REPEAT, max(MIN_REPEAT, REPEAT_BUDGET_MS / max(first, 1e-3))))
    return float(np.median([_timed(compiled, arrays, scalars) for _ in range(repeat)]))


def _timed(compiled, arrays, scalars) -> float:
    import cupy

    from compiler.cuda.launch import launch

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    launch(compiled, arrays, scalars)
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop)
