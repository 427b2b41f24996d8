"""The single-GPU tuner's cache: $PHOBOS_CACHE_DIR/autotune.json (common/cache.py's folder).

One JSON object, key -> entry {"best": tile values, "ms": the winner's median, "schedule":
schedule.Schedule's fields, "dims": the dimensions it was tuned at}. The key (cache_key) names
the kernel, the sha256 of its source, its dimensions, the precision of its dots, the GPU's name
and compute capability, the compiler's, NVRTC's and the driver's versions. Every winner is
stored twice: under its exact dimensions and under their shape bucket (shape_bucket), so a size
near a tuned one (4000 after 4096) reuses that tuning instead of timing again; a bucket's entry
is reused only where its tile values bind at the new dimensions.

An entry that is not what the tuner writes (hand-edited, truncated by a crash of another
writer's version, or from a format this code does not read) is corrupted: `lookup` warns once,
naming it, and answers None, so the tuner times again and `store` overwrites it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

from common import cache
from common.log import get_logger
from compiler.cuda import nvrtc, target
from compiler.cuda.compiled import compiler_version
from compiler.cuda.schedule import Schedule
from compiler.frontend import ir, walk
from compiler.frontend.binding import bind

CACHE_FILE = "autotune.json"  # in common.cache's folder
BUCKET_FROM = 256  # smaller dimensions (a head's width, a short reduction) shape the code: exact

_log = get_logger()


def cache_path() -> Path:
    return cache.cache_file(CACHE_FILE)


def read_cache() -> dict:
    return cache.read_json(CACHE_FILE)


def write_cache(entries: dict) -> None:
    cache.write_json(CACHE_FILE, entries)


def cache_key(
    kernel: ir.Kernel,
    dims: dict[str, int],
    gpu: str,
    tf32: bool = False,
    cc: int = target.DEFAULT_CC,
    bucket: bool = False,
) -> str:
    """The precision is part of the key: a TF32 winner is not the exact-f32 winner; so is the
    compute capability: a schedule is never replayed on a GPU that cannot run it; so are the
    driver's and NVRTC's versions (either can change what is fastest). With `bucket`, each
    dimension is replaced by its shape bucket, the key that nearby sizes share."""
    src = hashlib.sha256(kernel.source.encode()).hexdigest()
    shown = {k: shape_bucket(v) for k, v in dims.items()} if bucket else dims
    dims_text = ",".join(f"{k}={v}" for k, v in sorted(shown.items()))
    major, minor = nvrtc.version()
    # The source already implies the precision; naming it keeps entries apart should a precision
    # ever be chosen outside the source (a flag), and makes the cache readable.
    dots = ",".join(walk.dot_modes(kernel))
    forced = "|tf32" if tf32 else ""  # the compile_kernel(tf32=True) override of exact-f32 dots
    version = f"{compiler_version()}+nvrtc{major}.{minor}+driver{driver_version()}"
    near = "|bucket" if bucket else ""
    return f"{kernel.name}|{src}|{dims_text}{near}|dots={dots}{forced}|{gpu}|sm_{cc}|{version}"


def shape_bucket(value: int) -> str:
    """A dimension's bucket: itself below BUCKET_FROM, else the power of two nearest to it on a
    log scale (2897..5792 -> ~4096), so 4000 and 4096 share a tuning, 4096 and 8192 do not."""
    if value < BUCKET_FROM:
        return str(value)
    return f"~{2 ** round(math.log2(value))}"


def driver_version() -> int:
    """The CUDA driver's version (12040 for 12.4), 0 without one (no cupy or no driver)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.driverGetVersion())
    except Exception:  # no GPU here: nothing is tuned, the key is only built by tests
        return 0


def lookup(kernel: ir.Kernel, dims: dict[str, int], keys: tuple[str, str], points, cc: int):
    """(best, ms, schedule) of the exact key's entry, else of the bucket's where its tile values
    are in `points` and bind at `dims`; None when neither is usable (a corrupted one warns)."""
    entries = read_cache()
    for key, near in zip(keys, (False, True), strict=True):
        entry = entries.get(key)
        if entry is None:
            continue
        parsed = parse_entry(entry, kernel)
        if isinstance(parsed, str):
            _log.warning("autotune cache entry is corrupted; tuning it again", file=str(cache_path()),
                         kernel=kernel.name, dims=_dims_text(dims), why=parsed)
            continue
        best, ms, schedule = parsed
        if target.refusal(target.schedule_need(schedule), cc):  # written by hand or an older key
            continue
        if near and not _fits(kernel, dims, best, points):
            continue
        return best, ms, schedule
    return None


def store(keys: tuple[str, str], dims: dict[str, int], best: dict, ms: float, schedule: Schedule) -> None:
    entries = read_cache()
    entry = {"best": best, "ms": ms, "schedule": dataclasses.asdict(schedule), "dims": dict(dims)}
    for key in keys:
        entries[key] = entry
    write_cache(entries)


def parse_entry(entry, kernel: ir.Kernel):
    """(best, ms, schedule) of a well-formed entry, else why it is not one."""
    if not isinstance(entry, dict):
        return "not an object"
    best, ms = entry.get("best"), entry.get("ms")
    names = {d.name: d.values for d in kernel.autotune.dims} if kernel.autotune else {}
    if not isinstance(best, dict) or set(best) != set(names):
        return f"its tile values {best!r} do not name the @autotune values {sorted(names)}"
    if any(type(v) is not int or v not in names[k] for k, v in best.items()):
        return f"its tile values {best} are not in the @autotune space"
    if type(ms) not in (int, float) or not math.isfinite(ms) or ms <= 0:
        return f"its time {ms!r} is not a positive number of milliseconds"
    fields = entry.get("schedule", {})
    why = _schedule_refusal(fields)
    if why:
        return f"its schedule {fields!r} is not one ({why})"
    return dict(best), float(ms), Schedule(**fields)


def _schedule_refusal(fields) -> str | None:
    """Why `fields` are not a Schedule's: each known field, of its default's type (an int where
    the default is None), nothing else."""
    if not isinstance(fields, dict):
        return "not an object"
    known = {f.name: f.default for f in dataclasses.fields(Schedule)}
    for name, value in fields.items():
        if name not in known:
            return f"no field {name}"
        default = known[name]
        wanted = (int, type(None)) if default is None else (type(default),)
        if type(value) not in wanted:
            return f"{name} = {value!r}"
    return None


def _fits(kernel: ir.Kernel, dims: dict[str, int], best: dict, points) -> bool:
    from common.errors import UserError
    from compiler.frontend.diagnostics import CompileError

    if best not in points:
        return False
    try:
        bind(kernel, dims, None, best)
    except (CompileError, UserError, ValueError):
        return False
    return True


def _dims_text(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(dims.items())) or "no dims"
