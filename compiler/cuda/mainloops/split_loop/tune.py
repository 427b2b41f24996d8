"""The split factor as a tuning dimension (issue 33: chosen by the tuner and the cost model).

    candidates(model, iterations)              the factors timed: the cost model's, half, double
    tune_factor(kernel, binding, ...)          the fastest of them on this GPU, cached

The cost model (split_plan.model_factor) says whether a split pays at all and about how far; on
a GPU, a tuned kernel then times its launch sequence at a few factors around that choice and keeps
the fastest, in the tuning cache (tuning/cache.py's file) under a key of its own: the kernel's
tuning key (source, dims, GPU, capability, driver and NVRTC versions), the tile values and the
schedule. A factor the user forces (--split N, bind(split=N)) is never tuned, nor is a kernel
called with autotune=False (the cost model's factor is used).
"""

from __future__ import annotations

import math

import numpy as np

from common import options as env_options
from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.cuda.tuning import cache as tune_cache
from compiler.frontend import ir
from compiler.frontend.binding import Binding

SCALES = (0.5, 1.0, 2.0)  # of the model's factor


def candidates(model: int, iterations: int) -> list[int]:
    """The factors timed: the cost model's, half and double it, none above the iterations (a
    chunk holds at least one)."""
    most = max(1, iterations)
    return sorted({min(most, max(2, round(model * s))) for s in SCALES})


def _key(kernel: ir.Kernel, binding: Binding, gpu: str, cc: int, schedule: Schedule) -> str:
    base = tune_cache.cache_key(kernel, dict(binding.dims), gpu, cc=cc)
    tiles = ",".join(f"{k}={v}" for k, v in sorted(binding.tile_values.items()))
    return f"split|{base}|tiles={tiles}|{schedule.key()}"


def cached_factor(key: str) -> int | None:
    entry = tune_cache.read_cache().get(key)
    factor = entry.get("split") if isinstance(entry, dict) else None
    return factor if isinstance(factor, int) and not isinstance(factor, bool) and factor >= 1 else None


def tune_factor(kernel: ir.Kernel, binding: Binding, *, schedule: Schedule = DEFAULT, cc: int,
                sm_count: int, gpu: str | None = None, measure=None) -> int:
    """The split factor of `kernel`'s loop at `binding` on this GPU: 1 where the cost model does
    not split, else the fastest candidate (`measure(factor) -> ms`, by default the launch sequence
    timed on random inputs), read from the cache when it holds one (PHOBOS_RETUNE times again)."""
    from compiler.cuda.mainloops.split_loop import transform as split_loop
    from compiler.cuda.tuning import autotune

    model = split_plan.model_factor(kernel, binding, sm_count)
    gpu = gpu or autotune.gpu_name()
    if model <= 1 or gpu is None:
        return model
    key = _key(kernel, binding, gpu, cc, schedule)
    found = None if env_options.current().retune else cached_factor(key)
    if found is not None:
        return found
    sf = split_loop.split_form(kernel)
    start, stop, step = split_loop.iterations(kernel, sf.loop, dict(binding.env))
    iterations = max(0, math.ceil((stop - start) / step))
    measure = measure or _timer(kernel, binding, schedule, cc, sm_count)
    timings = {f: measure(f) for f in candidates(model, iterations)}
    best = min(timings, key=lambda f: (timings[f], f))
    entries = tune_cache.read_cache()
    entries[key] = {"split": best, "ms": timings[best], "model": model,
                    "timings": {str(f): ms for f, ms in timings.items()}}
    tune_cache.write_cache(entries)
    return best


def _timer(kernel, binding, schedule, cc: int, sm_count: int):
    """Median milliseconds of the whole launch sequence at a factor, CUDA events, random inputs."""
    import cupy

    from compiler.cuda.mainloops.split_loop.launch import compile_sequence, launch_sequence, scratch_arrays
    from compiler.cuda.tuning.timing import tuning_inputs

    arrays, scalars = tuning_inputs(kernel, dict(binding.env))

    def measure(factor: int) -> float:
        sequence = compile_sequence(kernel, binding, schedule=schedule, cc=cc, split=factor,
                                    sm_count=sm_count)
        both = arrays | scratch_arrays(sequence)
        for _ in range(2):
            launch_sequence(sequence, arrays, scalars, scratch=both)
        times = []
        for _ in range(7):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            launch_sequence(sequence, arrays, scalars, scratch=both)
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop))
        return float(np.median(times))

    return measure
