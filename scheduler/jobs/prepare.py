"""Everything a job needs before any pod is touched: the cluster program and checked storage.

The job's kernel is parsed and checked once, here (`PreparedJob.kernel`); every later compile of
the job (the tuner's combinations, its leaf points, the chosen values) starts from that checked
kernel through `compile_program`, the scheduler's one call of the cluster compiler.

The checks are one visible list, PREPARE_CHECKS (and NEW_JOB_CHECKS for `new-job`), of named
stages over a `Checking` state, run by common/pipeline.run_stages. Their order matters for the
guarantee "bad input never half-writes an output": the kernel is checked against the job, the
dims against the existing files' headers, the kernel compiled, every URI resolved inside the
storage roots and every input's and existing output's header checked against the shape and dtype
the program gives, all before a staging copy is created or a pod allocates anything.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from common import storage, uri
from common.atomic import refuse_read_only
from common.errors import UserError
from common.pipeline import Stage, run_stages
from compiler.cluster.tree import SplitRequest
from compiler.frontend import ir
from compiler.frontend.binding import scalar_value
from scheduler.jobs.jobfile import Job, check_against_kernel, job_kernel
from schemas.program import ClusterProgram


@dataclass(frozen=True)
class TensorPlace:
    name: str
    uri: str  # absolute file:// URI handed to the pods (they resolve it under their own roots)
    path: Path  # the confined path
    role: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PreparedJob:
    job: Job
    job_id: str
    program: ClusterProgram
    kernel: ir.Kernel  # the job's kernel, parsed and checked once by `prepare`
    scalars: dict[str, float | int]  # typed as the kernel declares them
    tensors: dict[str, TensorPlace]
    # The values the user pinned (the job's, overridden by the run's --cluster/--tile): the tuners
    # search only the other names; the program's values also hold each other name's first value.
    pinned_cluster: dict[str, int] = dataclasses.field(default_factory=dict)
    pinned_tiles: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def uris(self) -> dict[str, str]:
        return {name: t.uri for name, t in self.tensors.items()}

    @property
    def outputs(self) -> list[TensorPlace]:
        return [t for t in self.tensors.values() if t.role in ("output", "inout")]


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(4)


def compile_program(kernel: ir.Kernel, dims: dict[str, int], cluster_values: dict[str, int] | None = None,
                    tile_values: dict[str, int] | None = None, split: SplitRequest | None = None
                    ) -> ClusterProgram:
    """The cluster program of the checked `kernel` at `dims` and the given @cluster and @autotune
    values (each name's first where not given), its cluster loop split as `split` asks (None: not
    split): the scheduler's one way to compile."""
    from compiler.cluster.build import compile_cluster

    return compile_cluster(kernel, dict(dims), cluster_values=cluster_values or None,
                           tile_values=dict(tile_values) if tile_values else None, split=split)


def split_of(program: ClusterProgram) -> SplitRequest | None:
    """The split `program` was compiled with (None: its cluster loop is not split)."""
    r = program.reduction
    return SplitRequest(r.shares, r.tree, r.hosts) if r is not None and r.shares > 1 else None


def recompile(prepared: PreparedJob, cluster_values: dict[str, int],
              tile_values: dict[str, int] | None = None, split: SplitRequest | None = None) -> PreparedJob:
    """The prepared job at other @cluster values (and @autotune values and split, where given;
    default the ones it was prepared with); the kernel is not parsed again and storage is the same."""
    tiles = tile_values if tile_values is not None else dict(prepared.program.tile_values)
    split = split if split is not None else split_of(prepared.program)
    program = compile_program(prepared.kernel, dict(prepared.job.dims), cluster_values, tiles, split)
    return dataclasses.replace(prepared, program=program)


def compile_any(kernel: ir.Kernel, dims: dict[str, int], pinned: dict[str, int],
                tile_values: dict[str, int] | None, split: SplitRequest | None = None) -> ClusterProgram:
    """For --autotune, which picks its own values: the program at the first @cluster combination
    that compiles; when none does, one error listing every combination with its reason."""
    from compiler.cluster.build import cluster_space

    reasons = []
    for combination in cluster_space(kernel, pinned):
        try:
            return compile_program(kernel, dims, combination, tile_values, split)
        except UserError as err:
            message = (getattr(err, "message", None) or str(err)).splitlines()[0]
            label = " ".join(f"{k}={v}" for k, v in combination.items())
            reasons.append(f"  {label}: {message}")
    raise UserError("no @cluster combination compiles:\n" + "\n".join(reasons))


def stored_tensors(program: ClusterProgram):
    """The program's tensors that live in storage: all but a split reduction's partials, which
    live only in the pods' buffers."""
    return [t for t in program.tensors if t.role != "partial"]


def typed_scalars(job: Job, kernel: ir.Kernel) -> dict[str, float | int]:
    declared = {s.name: s.dtype for s in kernel.scalars}
    return {name: scalar_value(name, value, declared.get(name, "f32")) for name, value in job.scalars}


def place_tensors(job: Job, program: ClusterProgram, job_dir: Path, roots: list[Path],
                  kernel: ir.Kernel | None = None) -> dict[str, TensorPlace]:
    """Resolve and check every tensor's storage (reads .npy headers only; writes nothing). An
    inout tensor whose file is missing is created like an output, unless `kernel` reads its old
    values first."""
    places: dict[str, TensorPlace] = {}
    uris = dict(job.tensors)
    for info in stored_tensors(program):
        if info.name not in uris:
            raise UserError(f"job gives no URI for tensor {info.name}")
        path = uri.confine(uris[info.name], roots, base=job_dir)
        place = TensorPlace(info.name, uri.resolved_uri(path), path, info.role, info.dtype,
                            tuple(info.shape))
        if info.role == "inout" and not path.exists():
            require_creatable(kernel or job_kernel(job), info.name, path)
        if info.role == "input" or (info.role == "inout" and path.exists()):
            storage.check_tensor(path, place.shape, place.dtype)
        elif path.exists():
            # An output that exists is overwritten only when the job succeeds, and only by a
            # tensor of the same shape and dtype: anything else is probably the wrong file.
            storage.check_tensor(path, place.shape, place.dtype)
        if info.role != "input":
            check_output_folder(info.name, path)
            refuse_read_only(path, f"tensor {info.name}")
        places[info.name] = place
    uri.check_distinct_files([(p.name, p.path, p.role != "input") for p in places.values()])
    return places


def check_output_folder(tensor: str, path: Path) -> None:
    """Found before any pod starts: the output's staging copy and its commit are made in its folder."""
    if not path.parent.is_dir():
        raise UserError(f"tensor {tensor}: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UserError(f"tensor {tensor}: folder {path.parent} is not writable "
                        "(the output's staging copy and commit are made there)")


def require_creatable(kernel: ir.Kernel, tensor: str, path: Path) -> None:
    """An output that does not exist yet is created, unless the kernel reads its old values
    first; then the error points at the line that reads them."""
    from compiler.frontend.diagnostics import CompileError
    from compiler.frontend.walk import first_old_value_read

    span = first_old_value_read(kernel, tensor)
    if span is not None:
        raise CompileError(span, f"tensor {tensor}: {path} does not exist, and the kernel reads its old "
                                 "values here before writing them; create the file first")


# A tensor this large (2^36 elements, 256 GiB of f32) is a typo in a dimension, not a job; refusing
# it up front keeps the cluster compiler from trying to enumerate millions of units (found by
# tools/fuzz_soak.py: a mutated dimension made it run out of memory).
MAX_TENSOR_ELEMENTS = 1 << 36


def check_dims_against_files(job: Job, kernel: ir.Kernel, job_dir: Path, roots: list[Path]) -> None:
    """Before compiling: every tensor's size from the dims is sane, and every existing file's
    header matches them, so a wrong dimension fails as one line instead of a huge compile."""
    from compiler.frontend.binding import tensor_shape

    dims = dict(job.dims)
    uris = dict(job.tensors)
    for param in kernel.tensors:
        try:
            shape = tensor_shape(param, dims)
        except KeyError:  # a shape naming a tile value: checked after compiling
            continue
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise UserError(f"tensor {param.name}: dims give it shape {list(shape)}, more than "
                            f"{MAX_TENSOR_ELEMENTS} elements; is a dimension wrong?")
        if param.name in uris:
            path = uri.confine(uris[param.name], roots, base=job_dir)
            if path.exists():
                storage.check_tensor(path, shape, param.dtype)


# ---- the checks, as one visible list each ------------------------------------------------------


@dataclass(frozen=True)
class Checking:
    """What the checks of one job know so far: the job and where it runs, then its kernel, its
    program and its tensors' places, filled in by the checks in order."""

    job: Job
    job_dir: Path
    roots: list[Path]  # the storage roots every URI must resolve inside
    values: dict[str, int]  # the @cluster values asked for (the job's, overridden by the run's)
    tiles: dict[str, int]  # the @autotune values asked for
    split: SplitRequest | None
    any_values: bool = False  # --autotune: the first @cluster combination that compiles
    kernel: ir.Kernel | None = None  # the caller's, where it parsed the kernel already
    program: ClusterProgram | None = None
    tensors: dict[str, TensorPlace] = dataclasses.field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _check_kernel(c: Checking) -> Checking:
    """The one parse and check of the job's kernel (unless the caller's is given), and the job's
    dims, scalars and tensors against it."""
    kernel = job_kernel(c.job, c.kernel)
    check_against_kernel(c.job, kernel)
    return dataclasses.replace(c, kernel=kernel)


def _check_search_space(c: Checking) -> Checking:
    from compiler.cluster.build import values_outside_space

    return dataclasses.replace(c, warnings=c.warnings + tuple(values_outside_space(c.kernel, c.values)))


def _check_dims(c: Checking) -> Checking:
    check_dims_against_files(c.job, c.kernel, c.job_dir, c.roots)
    return c


def _compile(c: Checking) -> Checking:
    dims = dict(c.job.dims)
    if c.any_values:
        program = compile_any(c.kernel, dims, c.values, c.tiles, c.split)
    else:
        program = compile_program(c.kernel, dims, c.values, c.tiles, c.split)
    return dataclasses.replace(c, program=program)


def _place_storage(c: Checking) -> Checking:
    return dataclasses.replace(c, tensors=place_tensors(c.job, c.program, c.job_dir, c.roots, c.kernel))


def _check_files_for_later(c: Checking) -> Checking:
    return dataclasses.replace(c, warnings=c.warnings + tuple(files_for_later(c.job, c.program, c.kernel,
                                                                                 c.job_dir, c.roots)))


# A run's checks: every one passes before a staging copy is created or a pod allocates anything.
PREPARE_CHECKS = (
    Stage("kernel", _check_kernel),
    Stage("dims against files", _check_dims),
    Stage("compile", _compile),
    Stage("storage", _place_storage),
)

# `new-job`'s: what needs no pod and no storage roots; a file that does not exist yet is a warning.
NEW_JOB_CHECKS = (
    Stage("kernel", _check_kernel),
    Stage("search space", _check_search_space),
    Stage("dims against files", _check_dims),
    Stage("compile", _compile),
    Stage("files", _check_files_for_later),
)


def prepare(job: Job, job_path: Path, roots: list[Path], cluster_values: dict[str, int] | None = None,
            job_id: str | None = None, tile_values: dict[str, int] | None = None,
            any_values: bool = False, split: SplitRequest | None = None,
            kernel: ir.Kernel | None = None) -> PreparedJob:
    """The job through PREPARE_CHECKS. `cluster_values`, `tile_values` and `split` override the
    job's; with `any_values` (--autotune) the first @cluster combination that compiles stands in
    until the tuner chooses. `kernel`: the job's kernel as the caller parsed and checked it
    already (else parsed here)."""
    start = Checking(job, Path(job_path).resolve().parent, roots,
                     values={**dict(job.cluster_values), **(cluster_values or {})},
                     tiles={**dict(job.tile_values), **(tile_values or {})},
                     split=split or job.split, any_values=any_values, kernel=kernel)
    c = run_stages(PREPARE_CHECKS, start, what="job check")
    return PreparedJob(job, job_id or new_job_id(), c.program, c.kernel, typed_scalars(job, c.kernel),
                       c.tensors, pinned_cluster=c.values, pinned_tiles=c.tiles)


def check_new_job(job: Job, job_path: Path, kernel: ir.Kernel | None = None) -> list[str]:
    """The job through NEW_JOB_CHECKS, for `new-job`: a job that can never run is refused
    (UserError); returned are warning lines (values outside a search space, tensor files the
    kernel reads that do not exist yet and must before the job runs)."""
    anywhere = [Path("/")]  # the run confines storage to its roots; new-job only checks headers
    start = Checking(job, Path(job_path).resolve().parent, anywhere, dict(job.cluster_values),
                     dict(job.tile_values), job.split, kernel=kernel)
    return list(run_stages(NEW_JOB_CHECKS, start, what="job check").warnings)


def files_for_later(job: Job, program: ClusterProgram, kernel: ir.Kernel, job_dir: Path,
                    roots: list[Path]) -> list[str]:
    """new-job's storage check: every existing file's header (what the dims alone could not check,
    a shape naming a tile value), every output's folder; a warning for each file that must exist
    by the time the job runs and does not yet."""
    from compiler.frontend.walk import first_old_value_read

    warnings = []
    for info in stored_tensors(program):
        path = uri.confine(dict(job.tensors)[info.name], roots, base=job_dir)
        if path.exists():
            storage.check_tensor(path, tuple(info.shape), info.dtype)
        elif info.role == "input":
            warnings.append(f"warning: tensor {info.name}: {path} does not exist yet; the kernel reads it, "
                            "so it must when the job runs")
        elif (span := first_old_value_read(kernel, info.name)) is not None:
            warnings.append(f"warning: tensor {info.name}: {path} does not exist yet, and the kernel reads "
                            f"its old values at {span.file}:{span.line}:{span.col} before writing them, so "
                            "it must when the job runs")
        if info.role != "input":
            check_output_folder(info.name, path)
            refuse_read_only(path, f"tensor {info.name}")
    return warnings
