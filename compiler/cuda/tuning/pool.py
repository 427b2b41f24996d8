"""Compile the tuner's candidates in parallel processes (NVRTC and codegen are CPU-bound).

Workers are fresh interpreters running this module (`python -m compiler.cuda.tuning.pool`),
not forks or multiprocessing spawns: a fork of a process that holds a CUDA context (the tuner's,
which times on the GPU) is unsafe, and multiprocessing's spawn re-imports the user's main script.
Each worker reads one pickled list of tasks on stdin and writes one pickled result per task on
stdout as soon as it is made, so that the tuner can load a candidate while others still compile.
With one usable core, or one task, everything is compiled in this process; a worker that dies is
not fatal either: the tasks it did not answer are compiled here.

The workers make PTX only. Machine code made in them (cuLink) ran 1.6-4.6% slower on the H100
than the same PTX JIT-compiled by cuModuleLoadData in the tuner's process, so the tuner loads
the PTX itself (build_all's `then`: launch.load_refusal, on the thread that received it) before timing.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from common import options as env_options

MAX_WORKERS = 16  # NVRTC is single-threaded: one process per core, up to this
WORKER = ("-m", "compiler.cuda.tuning.pool")  # a worker's command after the interpreter


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


def build_all(tasks: list, workers: int | None = None, then=None) -> list:
    """build() of every task, in order, over `workers` processes (default: the usable cores).
    With `then`, each compiled result is handed to then(compiled) as soon as its worker sends it,
    on the thread that received it, while the other workers go on compiling (the tuner loads the
    PTX there: the driver's JIT overlaps NVRTC); a non-None answer (why it was refused) takes the
    result's place as (None, answer)."""
    workers = min(workers or usable_cores(), MAX_WORKERS, len(tasks))
    finish = _finisher(then)
    if workers <= 1:
        return [finish(build(t)) for t in tasks]
    chunks = [tasks[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda chunk: [finish(r) for r in _run_worker(chunk)], chunks))
    results = [None] * len(tasks)
    for i, part in enumerate(parts):
        results[i::workers] = part
    return results


def _finisher(then):
    def finish(result):
        compiled, _ = result
        if then is None or compiled is None:
            return result
        refused = then(compiled)
        return result if refused is None else (None, refused)

    return finish


def _run_worker(chunk: list):
    """The results of `chunk`, yielded one by one as the worker process sends them (one pickle
    each); what a worker that fails leaves undone is compiled here, where errors surface."""
    env = dict(env_options.environment(), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = 0
    try:
        with subprocess.Popen([sys.executable, *WORKER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) as worker:
            worker.stdin.write(pickle.dumps(chunk))  # the worker reads all of it before it writes
            worker.stdin.close()
            try:
                while done < len(chunk):
                    result = pickle.load(worker.stdout)
                    if not (isinstance(result, tuple) and len(result) == 2):
                        break
                    done += 1
                    yield result
            finally:
                if done < len(chunk):  # it broke off: stop it, or its next write would wait forever
                    worker.kill()
    except (OSError, pickle.UnpicklingError, EOFError):
        pass
    for task in chunk[done:]:
        yield build(task)


def _main() -> None:
    tasks = pickle.loads(sys.stdin.buffer.read())
    for task in tasks:  # one pickle per result, sent as soon as it is made
        pickle.dump(build(task), sys.stdout.buffer)
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    _main()
