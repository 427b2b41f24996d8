"""Everything a job needs before any pod is touched: the cluster program and checked storage.

The order matters for the guarantee "bad input never half-writes an output": the kernel is
compiled, every URI is resolved inside the storage roots, every input's header is checked
against the shape and dtype the dims give, and every existing output's header too, all before
a staging copy is created or a pod allocates anything.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from common import storage
from common.errors import UserError
from compiler.cluster.program import ClusterProgram
from scheduler.jobfile import Job, check_against_kernel, job_kernel


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
    scalars: dict[str, float | int]  # typed as the kernel declares them
    tensors: dict[str, TensorPlace]

    @property
    def uris(self) -> dict[str, str]:
        return {name: t.uri for name, t in self.tensors.items()}

    @property
    def outputs(self) -> list[TensorPlace]:
        return [t for t in self.tensors.values() if t.role in ("output", "inout")]


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(4)


def compile_program(job: Job, cluster_values: dict[str, int] | None = None,
                    tile_values: dict[str, int] | None = None, any_values: bool = False) -> ClusterProgram:
    """The job's program at its @cluster and leaf @autotune values (the job's, overridden by the
    given ones). With `any_values` (for --autotune, which picks its own values) the first
    combination that compiles; when none does, one error listing every combination's reason."""
    from compiler.cluster import compile_cluster

    kernel = job_kernel(job)
    check_against_kernel(job, kernel)
    values = {**dict(job.cluster_values), **(cluster_values or {})}
    tiles = {**dict(job.tile_values), **(tile_values or {})} or None
    if not any_values:
        return compile_cluster(kernel, dict(job.dims), cluster_values=values or None, tile_values=tiles)
    from scheduler.tuner import search_space

    reasons = []
    for combination in search_space(kernel, values):
        try:
            return compile_cluster(kernel, dict(job.dims), cluster_values=combination, tile_values=tiles)
        except UserError as err:
            message = (getattr(err, "message", None) or str(err)).splitlines()[0]
            label = " ".join(f"{k}={v}" for k, v in combination.items())
            reasons.append(f"  {label}: {message}")
    raise UserError("no @cluster combination compiles:\n" + "\n".join(reasons))


def typed_scalars(job: Job) -> dict[str, float | int]:
    kernel = job_kernel(job)
    declared = {s.name: s.dtype for s in kernel.scalars}
    return {name: int(value) if declared.get(name) == "i32" else float(value) for name, value in job.scalars}


def place_tensors(job: Job, program: ClusterProgram, job_dir: Path,
                  roots: list[Path]) -> dict[str, TensorPlace]:
    """Resolve and check every tensor's storage (reads .npy headers only; writes nothing)."""
    places: dict[str, TensorPlace] = {}
    uris = dict(job.tensors)
    for info in program.tensors:
        if info.name not in uris:
            raise UserError(f"job gives no URI for tensor {info.name}")
        path = storage.resolve_uri(uris[info.name], roots, base=job_dir)
        place = TensorPlace(info.name, storage.path_to_uri(path), path, info.role, info.dtype,
                            tuple(info.shape))
        if info.role == "inout" and not path.exists():
            require_creatable(job, info.name, path)  # written before read: created like an output
        if info.role == "input" or (info.role == "inout" and path.exists()):
            storage.check_tensor(path, place.shape, place.dtype)
        elif path.exists():
            # An output that exists is overwritten only when the job succeeds, and only by a
            # tensor of the same shape and dtype: anything else is probably the wrong file.
            storage.check_tensor(path, place.shape, place.dtype)
        elif not path.parent.is_dir():
            raise UserError(f"tensor {info.name}: folder {path.parent} does not exist")
        places[info.name] = place
    return places


def require_creatable(job: Job, tensor: str, path: Path) -> None:
    """An output that does not exist yet is created, unless the kernel reads its old values
    first; then the error points at the line that reads them."""
    from compiler.frontend.diagnostics import CompileError
    from compiler.frontend.walk import first_old_value_read

    span = first_old_value_read(job_kernel(job), tensor)
    if span is not None:
        raise CompileError(span, f"tensor {tensor}: {path} does not exist, and the kernel reads its old "
                                 "values here before writing them; create the file first")


# A tensor this large (2^36 elements, 256 GiB of f32) is a typo in a dimension, not a job; refusing
# it up front keeps the cluster compiler from trying to enumerate millions of units (found by
# tools/fuzz_soak.py: a mutated dimension made it run out of memory).
MAX_TENSOR_ELEMENTS = 1 << 36


def check_dims_against_files(job: Job, job_dir: Path, roots: list[Path]) -> None:
    """Before compiling: every tensor's size from the dims is sane, and every existing file's
    header matches them, so a wrong dimension fails as one line instead of a huge compile."""
    from compiler.frontend.binding import tensor_shape

    kernel = job_kernel(job)
    check_against_kernel(job, kernel)
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
            path = storage.resolve_uri(uris[param.name], roots, base=job_dir)
            if path.exists():
                storage.check_tensor(path, shape, param.dtype)


def prepare(job: Job, job_path: Path, roots: list[Path], cluster_values: dict[str, int] | None = None,
            job_id: str | None = None, tile_values: dict[str, int] | None = None,
            any_values: bool = False) -> PreparedJob:
    check_dims_against_files(job, Path(job_path).resolve().parent, roots)
    program = compile_program(job, cluster_values, tile_values, any_values)
    tensors = place_tensors(job, program, Path(job_path).resolve().parent, roots)
    return PreparedJob(job, job_id or new_job_id(), program, typed_scalars(job), tensors)


def check_new_job(job: Job, job_path: Path) -> list[str]:
    """Everything `prepare` checks that needs no pod, for `new-job`: a job that can never run is
    refused (UserError); returned are warning lines (values outside a search space, tensor files
    that do not exist yet and must before the job runs)."""
    from compiler.cluster import values_outside_space
    from compiler.frontend.walk import first_old_value_read

    job_dir = Path(job_path).resolve().parent
    anywhere = [Path("/")]  # the run confines storage to its roots; new-job only checks headers
    kernel = job_kernel(job)
    warnings = values_outside_space(kernel, dict(job.cluster_values))
    check_dims_against_files(job, job_dir, anywhere)
    program = compile_program(job)
    for info in program.tensors:
        path = storage.resolve_uri(dict(job.tensors)[info.name], anywhere, base=job_dir)
        if not path.exists() and (info.role == "input" or first_old_value_read(kernel, info.name)):
            warnings.append(f"warning: tensor {info.name}: {path} does not exist yet; the kernel reads it, "
                            "so it must when the job runs")
        if info.role != "input" and not path.parent.is_dir():
            raise UserError(f"tensor {info.name}: folder {path.parent} does not exist")
    return warnings


# ---- staging: created after every check passed, committed or removed at the end ------------------


def create_staging(prepared: PreparedJob) -> dict[str, Path]:
    staged: dict[str, Path] = {}
    try:
        for place in prepared.outputs:
            staged[place.name] = storage.create_staging(place.path, place.shape, place.dtype, prepared.job_id,
                                                        copy_existing=place.path.exists())
    except BaseException:
        abort_staging(staged)
        raise
    return staged


def commit_staging(prepared: PreparedJob, staged: dict[str, Path]) -> None:
    for name, path in staged.items():
        storage.commit(path, prepared.tensors[name].path)


def abort_staging(staged: dict[str, Path]) -> None:
    for path in staged.values():
        storage.abort(path)
