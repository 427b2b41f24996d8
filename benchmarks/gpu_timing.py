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


def events_ms(fn, torch, reps: int = 5) -> float:
    """Milliseconds of one call of `fn`, the mean of `reps` back to back between two torch CUDA
    events on the current stream (a round of an alternated comparison with a torch anchor)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def graph_median_s(fns, warmup: int = 2, repeat: int = 7) -> float:
    """The device time of one call, without the host's launch overhead: `fns` (calls on distinct
    buffers, so that together they overflow the L2 cache and each call reads from HBM) warmed up
    on a side stream, captured once into a torch CUDA graph, the graph replayed between CUDA events;
    the median replay over len(fns). The calls must allocate nothing after their warm-up (the
    capture forbids it) and launch on torch's current stream."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            for fn in fns:
                fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for fn in fns:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / len(fns))
    return statistics.median(times)
