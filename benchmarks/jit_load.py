"""How long the driver's JIT (cuModuleLoadData of PTX) of the tuner's candidates takes, one module
after another and on threads (compiler/cuda/launch.load_all), and whether the driver's on-disk JIT
cache answers a second process. The candidates: bf16 matmul's warpgroup family at one tile point,
compiled by the tuner's pool (NVRTC). Each mode runs in a fresh process with its own GPU context
and a PTX made unique to it (a comment), so no mode reuses another's JIT.

    python3 benchmarks/jit_load.py --kernels 16 --out jit-load.json

Prints one JSON line per mode: {"mode", "threads", "kernels", "seconds"}: "serial" and "threads"
with the JIT cache off; "processes" JITs each kernel in a process of its own at once (as compile
workers with a GPU context would) with the cache on (CUDA_CACHE_PATH a fresh folder), and
"processes-warm", a second process with the same PTX, loads them all from it. With --all-modes
also 4 threads, and the cache filled by 16 threads ("cache-cold") and read back ("cache-warm")."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def candidates(count: int) -> list:
    sys.path.insert(0, str(ROOT / "tests" / "cuda"))
    from cuda_cases import load_example

    from compiler.cuda.tuning import autotune
    from compiler.cuda.tuning import pool as compile_pool

    kernel = load_example("matmul_bf16.phk")
    dims = {"M": 8192, "N": 8192, "K": 8192}
    _, families, _ = autotune.search_families(kernel, False, 90)
    point = {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}
    tasks = [(kernel, dims, point, s, False, 90) for s in families[-1][:count]]
    return [c for c, _ in compile_pool.build_all(tasks) if c is not None]


def child(path: str, threads: int, tag: str, only: int | None) -> None:
    import cupy

    from compiler.cuda import launch

    built = pickle.loads(Path(path).read_bytes())
    built = built if only is None else built[only:only + 1]
    kernels = [dataclasses.replace(k, ptx=k.ptx + f"\n// {tag}\n") for k in built]
    cupy.cuda.runtime.free(0)  # the context first: its creation is not the JIT's
    start = time.perf_counter()
    refused = launch.load_all(kernels, threads)
    seconds = time.perf_counter() - start
    print(json.dumps({"threads": threads, "kernels": len(kernels), "seconds": round(seconds, 3),
                      "refused": [r for r in refused if r]}))


def _command(path: str, threads: int, tag: str, only: int | None = None) -> list[str]:
    tail = [] if only is None else ["--only", str(only)]
    return [sys.executable, __file__, "--child", path, "--threads", str(threads), "--tag", tag, *tail]


def run_mode(path: str, mode: str, threads: int, tag: str, env: dict) -> dict:
    done = subprocess.run(_command(path, threads, tag), capture_output=True, text=True, env=env, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    row = json.loads(lines[-1]) if lines else {"error": done.stderr[-400:]}
    return {"mode": mode, **row}


def run_processes(path: str, count: int, env: dict) -> dict:
    """One process per kernel at once, each with its own context, JIT cache on: the wall time of
    the fan-out (their start and context included), as compile workers would do it."""
    start = time.perf_counter()
    procs = [subprocess.Popen(_command(path, 1, "processes", i), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env) for i in range(count)]
    codes = [p.wait(timeout=120) for p in procs]
    return {"mode": "processes", "kernels": count, "seconds": round(time.perf_counter() - start, 3),
            "failed": sum(1 for c in codes if c)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=16)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tag", default="")
    ap.add_argument("--only", type=int)
    ap.add_argument("--all-modes", action="store_true", help="also 4 threads; the cache filled by threads")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.threads, args.tag, args.only)
        return 0
    folder = Path(tempfile.mkdtemp(prefix="jit-load-"))
    path = folder / "kernels.pickle"
    kernels = candidates(args.kernels)
    path.write_bytes(pickle.dumps(kernels))
    base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    off = dict(base, CUDA_CACHE_DISABLE="1")
    on = dict(base, CUDA_CACHE_PATH=str(folder / "jit-cache"))
    on.pop("CUDA_CACHE_DISABLE", None)
    modes = [lambda: run_mode(str(path), "serial", 1, "serial", off),
             lambda: run_mode(str(path), "threads", 16, "threads", off),
             lambda: run_processes(str(path), len(kernels), on),
             lambda: run_mode(str(path), "processes-warm", 1, "processes", on)]
    if args.all_modes:
        modes += [lambda: run_mode(str(path), "threads-4", 4, "threads-4", off),
                  lambda: run_mode(str(path), "cache-cold", 16, "cache", on),
                  lambda: run_mode(str(path), "cache-warm", 1, "cache", on)]
    rows = []
    for mode in modes:  # each row printed and written as it comes: a cap keeps the finished ones
        rows.append(mode())
        print(json.dumps(rows[-1]), flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
