"""Single-GPU @autotune: time every point of the search space that fits, keep the winner.

Points that cannot be generated (thread layout, shared memory, register budget) or that the
driver refuses to launch are pruned and reported, never run. The winner is cached in JSON at
$PHOBOS_CACHE_DIR/autotune.json (default ~/.cache/phobos/autotune.json), keyed by the sha256 of
the kernel's source, the dims, the GPU's name and the compiler version, and reused by later calls.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.atomic import write_atomically
from compiler.cuda import compile_kernel, compiler_version, nvrtc
from compiler.frontend import ir
from compiler.frontend.binding import bind
from compiler.frontend.diagnostics import CompileError


@dataclass(frozen=True)
class TuneResult:
    best: dict[str, int]
    best_ms: float
    timings: tuple[tuple[tuple[tuple[str, int], ...], float], ...]  # (point, median ms)
    pruned: tuple[tuple[tuple[tuple[str, int], ...], str], ...] = field(default=())  # (point, why)
    cached: bool = False


def cache_path() -> Path:
    base = os.environ.get("PHOBOS_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "phobos") / "autotune.json"


def cache_key(kernel: ir.Kernel, dims: dict[str, int], gpu: str) -> str:
    src = hashlib.sha256(kernel.source.encode()).hexdigest()
    dims_text = ",".join(f"{k}={v}" for k, v in sorted(dims.items()))
    major, minor = nvrtc.version()
    return f"{kernel.name}|{src}|{dims_text}|{gpu}|{compiler_version()}+nvrtc{major}.{minor}"


def _read_cache() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(entries: dict) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(entries, indent=1, sort_keys=True))


def gpu_name() -> str | None:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no cupy or no device: nothing is cached for "no GPU"
        return None


def cached_choice(kernel: ir.Kernel, dims: dict[str, int]) -> dict[str, int] | None:
    gpu = gpu_name()
    if gpu is None or kernel.autotune is None:
        return None
    entry = _read_cache().get(cache_key(kernel, dict(dims), gpu))
    return dict(entry["best"]) if entry else None


def search_points(kernel: ir.Kernel) -> list[dict[str, int]]:
    at = kernel.autotune
    if at is None:
        return [{}]
    names = [d.name for d in at.dims]
    return [
        dict(zip(names, values, strict=True)) for values in itertools.product(*(d.values for d in at.dims))
    ]


def _inputs(kernel: ir.Kernel, env: dict[str, int], seed: int = 0):
    import cupy

    rng = np.random.default_rng(seed)
    arrays = {}
    for p in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else env[d] for d in p.dims)
        if p.dtype == "i32":
            host = rng.integers(0, 8, size=shape, dtype=np.int32)
        else:
            host = rng.standard_normal(shape, dtype=np.float32)
            host = host.astype(np.float16) if p.dtype == "f16" else host
        arrays[p.name] = cupy.asarray(host)
    scalars = {p.name: (0.5 if p.dtype == "f32" else 1) for p in kernel.scalars}
    return arrays, scalars


def time_launch(compiled, arrays, scalars, warmup: int = 2, repeat: int = 7) -> float:
    """Median milliseconds of one launch, timed with CUDA events."""
    import cupy

    from compiler.cuda.launch import launch

    for _ in range(warmup):
        launch(compiled, arrays, scalars)
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch(compiled, arrays, scalars)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def tune(kernel: ir.Kernel, dims: dict[str, int], *, use_cache: bool = True, log=None) -> TuneResult:
    """Measure every fitting point on the current GPU; return (and cache) the fastest."""
    gpu = gpu_name()
    if gpu is None:
        raise RuntimeError("autotuning needs a GPU")
    base = bind(kernel, dims)
    key = cache_key(kernel, dict(base.dims), gpu)
    if use_cache:
        entry = _read_cache().get(key)
        if entry:
            return TuneResult(dict(entry["best"]), entry["ms"], (), (), cached=True)
    points = search_points(kernel)

    def build(point):
        try:
            return point, compile_kernel(kernel, bind(kernel, dims, None, point)), None
        except CompileError as e:
            return point, None, e.message

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        built = list(pool.map(build, points))
    arrays, scalars = _inputs(kernel, dict(base.env))
    timings, pruned = [], []
    for point, compiled, why in built:
        items = tuple(sorted(point.items()))
        if compiled is None:
            pruned.append((items, why))
            continue
        try:
            ms = time_launch(compiled, arrays, scalars)
        except Exception as e:  # the driver refused the launch (resources): prune, do not guess
            pruned.append((items, f"launch failed: {e}"))
            continue
        timings.append((items, ms))
        if log:
            log(f"{kernel.name} {dict(items)}: {ms:.4f} ms")
    if not timings:
        reasons = "; ".join(f"{dict(p)}: {why}" for p, why in pruned[:3])
        raise CompileError(kernel.span, f"no point of the @autotune search space fits this GPU ({reasons})")
    best_items, best_ms = min(timings, key=lambda t: t[1])
    entries = _read_cache()
    entries[key] = {"best": dict(best_items), "ms": best_ms}
    _write_cache(entries)
    return TuneResult(dict(best_items), best_ms, tuple(timings), tuple(pruned))
