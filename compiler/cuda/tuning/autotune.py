"""Single-GPU @autotune: time the points of the search space worth timing, keep the winner.

The stages of a first call: (1) the cache (tuning/cache.py: exact dimensions, then their shape
bucket) answers without compiling anything; (2) each candidate's CUDA source is generated, no
NVRTC, and the model (tuning/model.py: shared memory, registers, waves, bytes per FLOP) drops what
cannot fit or ranks far below its schedule's best; (3) the rest compile in parallel processes
(tuning/pool.py); (4) each is timed on the GPU, one progress line per point on stderr
(PHOBOS_TUNE_QUIET=1 silences them); (5) the winner is stored. Points that cannot be generated
or that the driver refuses to launch are pruned and reported, never run; so are schedules the
GPU cannot run (target.py: warpgroup MMA, TMA and ping-pong need sm_90a). PHOBOS_RETUNE=1 (or
tune(use_cache=False)) times again over a cached winner.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import sys
from dataclasses import dataclass, field

from common import options as env_options
from compiler import builtins
from compiler.cuda import mma, stages, target
from compiler.cuda.hoist import split_operand_lets
from compiler.cuda.schedule import (
    DEFAULT,
    SIMT_DOUBLE_BUFFER,
    SIMT_WIDE_BLOCK,
    TF32_TMA_PROBE,
    TMA_ATTENTION_PROBE,
    WGMMA_DEEP_PROBE,
    WGMMA_PROBE,
    WIDE_THREADS,
    Schedule,
    tensor_core_space,
    wide_blocks_searched,
)
from compiler.cuda.tuning import cache as tune_cache
from compiler.cuda.tuning.timing import REPEAT, Phases, time_launch, tuning_inputs
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
    schedule: Schedule = DEFAULT  # the code-generator choices of the winner (schedule.py)


@dataclass(frozen=True)
class Bench:
    """What every candidate is compiled for and timed with: the inputs and the GPU's capability."""

    arrays: dict | None
    scalars: dict | None
    cc: int = target.DEFAULT_CC
    timed: list = field(default_factory=list)  # every timing so far, for the progress lines' best
    phases: Phases = field(default_factory=Phases)  # where the seconds went (the summary line)


RETUNE_ENV = "PHOBOS_RETUNE"  # "1": time again even where the cache has a winner
QUIET_ENV = "PHOBOS_TUNE_QUIET"  # "1": no progress lines on stderr
FINALISTS = 2  # tile points per schedule family searched over the family's whole schedule space
FAMILY_MARGIN = 1.25  # a family whose best probe is this far behind the best is not searched (family_behind)


# the cache's names, where callers and tests have always found them
cache_key, cache_path = tune_cache.cache_key, tune_cache.cache_path
_read_cache, _write_cache = tune_cache.read_cache, tune_cache.write_cache


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def gpu_name() -> str | None:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no cupy or no device: nothing is cached for "no GPU"
        return None


def gpu_capability(cc: int | None = None) -> int:
    """`cc` when given, else the current GPU's compute capability (the H200's without one)."""
    return cc if cc is not None else target.local_capability() or target.DEFAULT_CC


def _keys(kernel, dims, gpu: str, tf32: bool, cc: int, space: str = "") -> tuple[str, str]:
    """The exact and the bucket key of a tuning (`space`: a hash naming a restricted search)."""
    return (tune_cache.cache_key(kernel, dims, gpu, tf32, cc) + space,
            tune_cache.cache_key(kernel, dims, gpu, tf32, cc, bucket=True) + space)


def _cached(kernel, dims, keys, points, cc: int) -> TuneResult | None:
    found = tune_cache.lookup(kernel, dims, keys, points, cc)
    if found is None:
        return None
    best, ms, schedule = found
    return TuneResult(best, ms, (), (), cached=True, schedule=schedule)


def cached_result(
    kernel: ir.Kernel, dims: dict[str, int], tf32: bool = False, cc: int | None = None
) -> TuneResult | None:
    """The cached winner (tile values and schedule) of a whole-space tuning on this GPU (of
    capability `cc`, by default the current one), or None."""
    gpu = gpu_name()
    if gpu is None or kernel.autotune is None:
        return None
    cc = gpu_capability(cc)
    return _cached(kernel, dict(dims), _keys(kernel, dict(dims), gpu, tf32, cc), search_points(kernel), cc)


def cached_choice(kernel: ir.Kernel, dims: dict[str, int]) -> dict[str, int] | None:
    found = cached_result(kernel, dims)
    return found.best if found else None


def search_points(kernel: ir.Kernel) -> list[dict[str, int]]:
    at = kernel.autotune
    if at is None:
        return [{}]
    names = [d.name for d in at.dims]
    return [
        dict(zip(names, values, strict=True)) for values in itertools.product(*(d.values for d in at.dims))
    ]


def tune(
    kernel: ir.Kernel,
    dims: dict[str, int],
    *,
    use_cache: bool = True,
    log=None,
    points: list[dict[str, int]] | None = None,
    schedules: list[Schedule] | None = None,
    tf32: bool = False,
    cc: int | None = None,
) -> TuneResult:
    """Measure every fitting (point, schedule) on the current GPU (of compute capability `cc`, by
    default asked of the device); return (and cache) the fastest.
    `points` defaults to the whole @autotune space. `schedules` defaults to the default schedule
    alone, except for kernels whose dots run on tensor cores at some point of the space
    (runs_on_tensor_cores): there the code generator's choices are searched too
    (schedule_search)."""
    gpu = gpu_name()
    if gpu is None:
        raise RuntimeError("autotuning needs a GPU")
    base = bind(kernel, dims)
    points = points if points is not None else search_points(kernel)
    cc = gpu_capability(cc)
    space = ""
    if points != search_points(kernel) or schedules not in (None, [DEFAULT]):
        text = (
            ";".join(sorted(str(sorted(p.items())) for p in points))
            + "|"
            + ",".join(s.key() for s in schedules or [DEFAULT])
        )
        space = "|" + hashlib.sha256(text.encode()).hexdigest()[:16]
    keys = _keys(kernel, dict(base.dims), gpu, tf32, cc, space)
    if use_cache and not env_options.current().retune:
        found = _cached(kernel, dict(base.dims), keys, points, cc)
        if found is not None:
            return found
    if log is None and not env_options.current().tune_quiet:
        log = _stderr_line
    phases = Phases()
    with phases("inputs"):
        bench = Bench(*tuning_inputs(kernel, dict(base.env)), cc, phases=phases)
    if schedules is None and runs_on_tensor_cores(kernel, dims, points, tf32):
        timings, pruned = schedule_search(kernel, dims, points, tf32, bench, log)
    elif schedules is None:
        timings, pruned = cuda_core_search(kernel, dims, points, tf32, bench, log)
    else:
        cands = [(p, s) for p in points for s in schedules]
        timings, pruned = _measure(kernel, dims, cands, tf32, bench, log, model=True)
    if not timings:
        reasons = "; ".join(f"{dict(p)}: {why}" for (p, _), why in pruned[:3])
        raise CompileError(kernel.span, f"no point of the @autotune search space fits this GPU ({reasons})")
    if log:
        log(phases.summary(kernel.name, len(pruned)))
    (best_items, best_schedule), best_ms = min(timings, key=lambda t: t[1])
    best = dict(best_items)
    tune_cache.store(keys, dict(base.dims), best, best_ms, best_schedule)
    many = len({sched for (_, sched), _ in timings + pruned}) > 1  # name the schedule when it varied

    def flat(rows):
        return tuple((p + ((("schedule", sched.key()),) if many else ()), v) for (p, sched), v in rows)

    return TuneResult(best, best_ms, flat(timings), flat(pruned), schedule=best_schedule)


def cuda_core_schedules(kernel: ir.Kernel) -> list[Schedule]:
    """The schedules searched for a kernel whose dots all run on CUDA cores: the default and,
    when a dot sits in a loop (its operands may be prefetched), two shared buffers per operand
    (Schedule.double_buffer, one barrier per iteration) and, with schedule.wide_blocks_searched()
    unless the kernel names its CTA size (@launch), the same on 128 threads (SIMT_WIDE_BLOCK: twice
    the register block per thread); the GPU's timing picks."""
    from compiler.frontend import walk

    looped = any(
        builtins.is_contraction(e)
        for loop in walk.iter_stmts(kernel.body) if isinstance(loop, ir.For)
        for e in walk.iter_body_exprs(loop.body)
    )
    if not looped:
        return [DEFAULT]
    launch = any(isinstance(a, ir.Launch) for a in kernel.attributes)
    return [DEFAULT, SIMT_DOUBLE_BUFFER] + ([] if launch or not wide_blocks_searched() else [SIMT_WIDE_BLOCK])


def cuda_core_search(kernel, dims, points, tf32: bool, inputs: Bench, log):
    """CUDA-core kernels: every point at each of cuda_core_schedules, then, where a dot sits in
    a loop, the FINALISTS best (point, schedule) pairs again in the grouped CTA order (CTAs that
    run together share operand rows in L2)."""
    schedules = cuda_core_schedules(kernel)
    cands = [(p, s) for p in points for s in schedules]
    timings, pruned = _measure(kernel, dims, cands, tf32, inputs, log, model=True)
    if len(schedules) > 1:
        best = sorted(timings, key=lambda t: t[1])[:FINALISTS]
        rest = [(dict(items), dataclasses.replace(s, order="grouped")) for (items, s), _ in best]
        more, why = _measure(kernel, dims, rest, tf32, inputs, log)
        timings += more
        pruned += why
    return timings, pruned


def runs_on_tensor_cores(kernel: ir.Kernel, dims: dict[str, int], points, tf32: bool) -> bool:
    """Whether a dot of the kernel runs on tensor cores at some point of `points` under `dims`:
    the fit stage sends the 16-bit dots of a shape the tensor cores cannot take (a GEMV's one
    row) to CUDA cores, and a kernel left with none there has no schedule to search (every
    schedule would time the same code)."""
    if not stages.tensor_core_dots(kernel, tf32):
        return False
    options = stages.Options(tf32=tf32)
    for point in points:
        try:
            leaf = stages.run(kernel, bind(kernel, dims, None, point), options, until="fit")
        except CompileError:
            return True  # a TF32 dot the tensor cores cannot take prunes its point: it stays one
        if stages.tensor_core_dots(leaf.kernel, tf32):
            return True
    return False


def schedule_search(kernel, dims, points, tf32: bool, inputs: Bench, log):
    """Tensor-core kernels: every point with the default schedule (mma.sync) and, where its dots
    can, with warpgroup MMA (grouped order; 4 stages, or for a single dot as many as fit, up to
    8), and for a loop of two dots (attention) also on four warpgroups (WIDE_THREADS) and fed by
    a producer warpgroup's bulk tensor copies (TMA_ATTENTION_PROBE); then the
    FINALISTS best points of each family with that family's whole schedule space
    (schedule.tensor_core_space: warp layout, pipeline depth, CTA order, copy placement,
    loop rotation). A tile shape that is best for one family is
    often not for the other, and a smaller tile can win with a shallower pipeline (two CTAs per
    multiprocessor). On a GPU other than sm_90 the warpgroup-MMA families are pruned whole
    (target.runnable_schedules): only mma.sync is searched. A family whose best probe is over
    FAMILY_MARGIN x the best probe of all is not searched further (family_behind)."""
    probes, families, refused = search_families(kernel, tf32, inputs.cc)
    cands = [(p, s) for p in points for s in probes]
    timings, pruned = _measure(kernel, dims, cands, tf32, inputs, log, model=True)
    pruned += [((tuple(sorted(p.items())), s), why) for p in points for s, why in refused]
    fastest = min((t for _, t in timings), default=None)
    for probe, space in zip(probes, families, strict=True):
        mine = sorted((t for t in timings if t[0][1] == probe), key=lambda t: t[1])
        behind = family_behind(mine, fastest)
        if behind:
            pruned.append((mine[0][0], behind))
            continue
        rest = [(dict(items), s) for (items, _), _ in mine[:FINALISTS] for s in space if s != probe]
        more, why = _measure(kernel, dims, rest, tf32, inputs, log)
        timings += more
        pruned += why
    return timings, pruned


def family_behind(mine: list, fastest: float | None) -> str | None:
    """Why a family whose probes timed `mine` (sorted, fastest first) is not searched further, or
    None: its best probe is over FAMILY_MARGIN x the fastest probe of any family. In 41 full
    searches on an H200 every family holding a candidate within 3% of the winner had its best
    probe within 1.18x of the fastest, and the families over 1.25x held 43% of the candidates
    (tests/cuda/test_tuner_record.py)."""
    if not mine or fastest is None or mine[0][1] <= FAMILY_MARGIN * fastest:
        return None
    if env_options.current().tune_exhaustive:
        return None
    return (f"family behind: its best probe {mine[0][1]:.3f} ms is over {FAMILY_MARGIN} x the best "
            f"probe {fastest:.3f} ms, so its schedule space is not searched")


def search_families(kernel: ir.Kernel, tf32: bool, cc: int):
    """The schedule families schedule_search tries on a GPU of capability `cc`: (probes, families,
    refused), each family probed by its probe at every point and then searched whole at its
    finalists (any point may be one); refused: (probe, why) of the families the GPU cannot run."""
    kernel = split_operand_lets(kernel, tf32)  # as the leaf compiler sees the dots' operands
    dots = stages.tensor_core_dots(kernel, tf32)
    single = len(dots) == 1  # matmul: the deeper rings and the deep probe (schedule.py)
    rotates = stages.loop_of_dots(kernel, dots)  # attention: its probe and space rotate the loop
    # a persistent grid is one CTA per multiprocessor of this GPU (mainloops/tma_ws/persistent.py)
    space = tensor_core_space(stages.cta_threads(kernel, DEFAULT) // 32, deep=single, rotates=rotates,
                              sm_count=_sm_count())
    families = [[s for s in space if not s.wgmma]]
    wg_tma = [s for s in space if s.tma and s.rotate]  # attention fed by TMA: its own family
    tma_tf32 = []
    if stages.uses_wgmma(kernel, dots, tf32):
        wg = [s for s in space if s.wgmma and s not in wg_tma]
        if any(mma.tensor_core_dtype(d, kernel, tf32) == "tf32" for d in dots):
            # the register-staged TF32 ring (mainloops/wgmma/tf32.py) has 3 stages and stores after the
            # dots whatever the schedule says: only the CTA order is left to search. The
            # TMA-fed one (mainloops/tma_ws/tf32.py, C^T by role swap) takes other tile shapes (TILE_N = 64
            # per warpgroup, TILE_M up to 256), so it is a family of its own, with its own probe
            tma_tf32 = [s for s in wg if s.tma and not s.persistent]  # persistent: 16-bit rings only
            wg = [s for s in wg if not s.tma and s.stages == 3 and not s.late_copies]
        # mainloops/wgmma/fp8_promote.py's two ways
        if any(d.precision and d.precision.mode in ir.FP8 for d in dots):
            wg += [dataclasses.replace(s, fp8_overlap=True) for s in wg if not s.pingpong]
        families.append(wg)
    wg_probe = WGMMA_DEEP_PROBE if single else dataclasses.replace(WGMMA_PROBE, rotate=rotates)
    probes = [DEFAULT, wg_probe][: len(families)]
    if tma_tf32:
        probes.append(TF32_TMA_PROBE)
        families.append(tma_tf32)
    if rotates and len(families) == 2:  # attention on four warpgroups (BR = 256): its own family
        probes.append(dataclasses.replace(wg_probe, threads=WIDE_THREADS))
        wide = [dataclasses.replace(s, threads=WIDE_THREADS) for s in families[1] if not s.pingpong]
        families.append(wide)  # ping-pong takes two warpgroups
        if wg_tma:
            probes.append(TMA_ATTENTION_PROBE)  # one CTA of 384 threads per multiprocessor
            families.append(wg_tma)
    return target.runnable_schedules(probes, families, cc)


def _measure(kernel, dims, candidates, tf32: bool, inputs: Bench, log, model: bool = False):
    """((point items, schedule), median ms) of each candidate that compiles and launches, and
    ((point items, schedule), why) of the others. Before anything is compiled the model
    (tuning/model.py) drops what cannot fit and, with `model`, what ranks far below its schedule's
    best; the rest compile in parallel processes (tuning/pool.py), are loaded (the driver's JIT)
    on several threads, then timed one by one: nothing else runs while a candidate is timed.
    A clearly slow candidate stops after two launches (timing.py; PHOBOS_TUNE_CUT=0 times all in
    full): on since an H100 picked the full timing's winners with it (issue 36's bf16 8192^3 and
    16384^3 rows, benchmarks/results/h100-2026-12-07-s3/call1/tuner)."""
    from compiler.cuda import launch
    from compiler.cuda.tuning import pool as compile_pool

    options = env_options.current()
    phases, cut = inputs.phases, options.tune_cut and not options.tune_exhaustive
    with phases("model"):
        candidates, pruned = _model_pruned(kernel, dims, candidates, tf32, inputs.cc, model)
    with phases("compile+load"):  # each candidate loaded (the driver's JIT) as its worker sends it
        load = functools.partial(launch.load_refusal, device=launch.current_device())
        tasks = [(kernel, dims, p, s, tf32, inputs.cc) for p, s in candidates]
        built = compile_pool.build_all(tasks, then=load)
    timings = []
    for k, ((point, schedule), (compiled, why)) in enumerate(zip(candidates, built, strict=True)):
        items = (tuple(sorted(point.items())), schedule)
        best = min((t for _, t in timings + inputs.timed), default=None)
        if why is None:
            with phases("time"):
                why, ms, launches = _timed(compiled, inputs, best if cut else None)
        if why is not None:
            pruned.append((items, why))
            continue
        timings.append((items, ms))
        if log:
            best = ms if best is None else min(best, ms)
            log(progress_line(kernel.name, k + 1, len(candidates), point, schedule, ms, best, launches))
    inputs.timed.extend(timings)
    return timings, pruned


def _timed(compiled, inputs: Bench, best: float | None):
    """(None, median ms, launches timed), or (why, None, 0) where the driver refused the launch;
    `best`: the best median so far, which a clearly slower candidate stops at (timing.py)."""
    try:
        ms, launches = time_launch(compiled, inputs.arrays, inputs.scalars, best=best)
    except Exception as e:  # the driver refused the launch (resources): prune, do not guess
        return f"launch failed: {e}", None, 0
    inputs.phases.timed += 1
    inputs.phases.cut += launches < REPEAT
    return None, ms, launches


def progress_line(name: str, k: int, n: int, point: dict, schedule: Schedule, ms: float, best: float,
                  launches: int = REPEAT) -> str:
    """One timed candidate: `launches` below the full timing's seven say it was cut (timing.py)."""
    values = ",".join(f"{a}={b}" for a, b in point.items())
    cut = f", {launches} launches" if launches < REPEAT else ""
    return f"tune {name}: point {k}/{n} {{{values}}} {schedule.key()} {ms:.3f} ms (best {best:.3f} ms{cut})"


def _model_pruned(kernel, dims, candidates, tf32: bool, cc: int, rank: bool):
    """(kept candidates, pruned rows): each candidate's source is generated (codegen, no NVRTC)
    and estimated by tune_model; a candidate codegen refuses is kept, for the compile to name."""
    from compiler.cuda.compiled import generate_source
    from compiler.cuda.tuning import model as tune_model

    estimates = []
    for point, schedule in candidates:
        try:
            b = bind(kernel, dims, None, point)
            gen = generate_source(kernel, b, tf32=tf32, schedule=schedule, cc=cc)
            estimates.append(tune_model.estimate(kernel, dict(b.env), gen, cc, _sm_count()))
        except CompileError as e:
            estimates.append(e.message)
    kept, dropped = tune_model.rank(candidates, estimates, cc, by_score=rank)
    return kept, [((tuple(sorted(p.items())), s), why) for (p, s), why in dropped]


def _sm_count() -> int:
    from compiler.cuda.tuning import model as tune_model

    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"])
    except Exception:  # no device: the model's default (an H100's)
        return tune_model.DEFAULT_SMS
