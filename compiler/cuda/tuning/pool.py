"""Compile the tuner's candidates in parallel processes (NVRTC and codegen are CPU-bound).

Workers are fresh interpreters running this module (`python -m compiler.cuda.tuning.pool`),
not forks or multiprocessing spawns: a fork of a process that holds a CUDA context (the tuner's,
which times on the GPU) is unsafe, and multiprocessing's spawn re-imports the user's main script.
Each worker reads one pickled list of tasks on stdin and writes the pickled list of results on
stdout. With one usable core, or one task, everything is compiled in this process; a worker
that dies is not fatal either: its tasks are compiled here.

The workers make PTX only. Machine code made in them (cuLink) ran 1.6-4.6% slower on the H100
than the same PTX JIT-compiled by cuModuleLoadData in the tuner's process, so the tuner loads
the PTX itself (launch.load_all, several threads at a time) before timing.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from common import options as env_options

MAX_WORKERS = 16  # NVRTC is single-threaded: one process per core, up to this


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


def build_all(tasks: list, workers: int | None = None) -> list:
    """build() of every task, in order, over `workers` processes (default: the usable cores)."""
    workers = min(workers or usable_cores(), MAX_WORKERS, len(tasks))
    if workers <= 1:
        return [build(t) for t in tasks]
    chunks = [tasks[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(_run_worker, chunks))
    results = [None] * len(tasks)
    for i, part in enumerate(parts):
        results[i::workers] = part
    return results


def _run_worker(chunk: list) -> list:
    env = dict(env_options.environment(), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-m", "compiler.cuda.tuning.pool"],
                              input=pickle.dumps(chunk), capture_output=True, env=env, check=True)
        part = pickle.loads(done.stdout)
        if isinstance(part, list) and len(part) == len(chunk):
            return part
    except (OSError, subprocess.CalledProcessError, pickle.UnpicklingError, EOFError):
        pass
    return [build(t) for t in chunk]  # the worker failed: compile here, where errors surface


def _main() -> None:
    tasks = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps([build(t) for t in tasks]))


if __name__ == "__main__":
    _main()
