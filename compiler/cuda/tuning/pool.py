"""Compile the tuner's candidates in parallel processes (NVRTC and codegen are CPU-bound).

Workers are fresh interpreters running this module (`python -m compiler.cuda.tuning.pool`),
not forks or multiprocessing spawns: a fork of a process that holds a CUDA context (the tuner's,
which times on the GPU) is unsafe, and multiprocessing's spawn re-imports the user's main script.
Each worker reads one pickled list of tasks on stdin and writes the pickled list of results on
stdout. With one usable core, or one task, everything is compiled in this process; a worker
that dies is not fatal either: its tasks are compiled here.

Given the tuner's GPU (`device`), each worker also has the driver turn its PTX into that GPU's
machine code (cuLink, what loading the PTX would do) and the tuner's process loads that image:
the driver's JIT of a warpgroup-MMA kernel takes a good part of a second, and done one candidate
after another in the timing process it was most of a first call. A worker without a CUDA
driver returns no image, and the PTX is loaded (and JIT-compiled) in the tuner as before.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from common import options as env_options

MAX_WORKERS = 16  # NVRTC and the JIT are single-threaded: one process per core, up to this
CU_JIT_INPUT_PTX = 1  # cuda.h's CUjitInputType


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def build(task):
    """(compiled, None) or (None, the compiler's message) for one (kernel, dims, point,
    schedule, tf32, cc) task."""
    from compiler.cuda.compiled import compile_kernel
    from compiler.frontend.binding import bind
    from compiler.frontend.diagnostics import CompileError

    kernel, dims, point, schedule, tf32, cc = task
    try:
        binding = bind(kernel, dims, None, point)
        return compile_kernel(kernel, binding, schedule=schedule, tf32=tf32, cc=cc), None
    except CompileError as e:
        return None, e.message


def build_all(tasks: list, workers: int | None = None, device: int | None = None) -> list:
    """build() of every task, in order, over `workers` processes (default: the usable cores);
    with `device`, the workers' machine code for that GPU is loaded here (launch.preload)."""
    workers = min(workers or usable_cores(), MAX_WORKERS, len(tasks))
    if workers <= 1:
        return [build(t) for t in tasks]
    chunks = [tasks[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda chunk: _run_worker(chunk, device), chunks))
    results = [None] * len(tasks)
    for i, part in enumerate(parts):
        results[i::workers] = part
    if device is not None:
        _preload(results)
    return [(compiled, why) for compiled, why, *_ in results]


def _preload(results: list) -> None:
    from compiler.cuda import launch

    for compiled, _, *image in results:
        if compiled is not None and image and image[0]:
            launch.preload(compiled, image[0])


def _run_worker(chunk: list, device: int | None) -> list:
    env = dict(env_options.environment(), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-m", "compiler.cuda.tuning.pool"],
                              input=pickle.dumps((chunk, device)), capture_output=True, env=env, check=True)
        part = pickle.loads(done.stdout)
        if isinstance(part, list) and len(part) == len(chunk):
            return part
    except (OSError, subprocess.CalledProcessError, pickle.UnpicklingError, EOFError):
        pass
    return [build(t) for t in chunk]  # the worker failed: compile here, where errors surface


def machine_code(ptx: str, device: int) -> bytes | None:
    """The driver's machine code of `ptx` for GPU `device`, or None where there is no driver
    (or it refuses: the tuner's own load then reports why)."""
    try:
        import cupy
        from cupy.cuda import driver

        cupy.cuda.Device(device).use()
        cupy.cuda.runtime.free(0)  # makes the device's context current, which cuLink needs
        state = driver.linkCreate()
        try:
            driver.linkAddData(state, CU_JIT_INPUT_PTX, ptx.encode(), "phobos.ptx")
            return bytes(driver.linkComplete(state))
        finally:
            driver.linkDestroy(state)
    except Exception:  # no cupy, no GPU, an old driver: the PTX is loaded as it is
        return None


def _main() -> None:
    tasks, device = pickle.loads(sys.stdin.buffer.read())
    results = [build(t) for t in tasks]
    if device is not None:
        results = [(c, why, machine_code(c.ptx, device) if c is not None else None) for c, why in results]
    sys.stdout.buffer.write(pickle.dumps(results))


if __name__ == "__main__":
    _main()
