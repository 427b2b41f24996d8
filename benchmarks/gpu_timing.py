"""The one way GPU benchmarks time a piece of device work: CUDA events around each run, after
warm-up runs, median of the repeats (seconds). Device work is asynchronous, so a host clock would
time the launch, not the work."""

from __future__ import annotations

import statistics


def cuda_median_s(fn, warmup: int = 2, repeat: int = 7) -> float:
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)
