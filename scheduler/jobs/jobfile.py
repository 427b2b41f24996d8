"""Job files: building one from flags (`new-job`), reading and writing it, printing it (`show-job`).

A job is a kernel (its whole source text travels inside the job), a value for every dimension,
the scalars and one storage URI per tensor. Building a job checks the kernel and that nothing is
missing or unknown, so a job file that exists is one the scheduler can at least start binding.

URIs (common/uri.py): `file:///abs/a.npy`, `file://localhost/abs/a.npy`, or a relative
`file:data/a.npy`, which is resolved against the directory holding the job file, so a job and
its data can be moved or committed together; a job's tensors are `.npy` files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common import uri as uri_module
from common.atomic import write_atomically
from common.errors import UserError
from common.uri import FileUri
from compiler.cluster.tree import SplitRequest
from compiler.frontend import ir
from compiler.frontend.binding import scalar_value

JOB_FORMAT = 1


@dataclass(frozen=True)
class Job:
    kernel_name: str
    kernel_source: str
    kernel_file: str
    dims: tuple[tuple[str, int], ...]
    scalars: tuple[tuple[str, float], ...]
    tensors: tuple[tuple[str, str], ...]  # (tensor parameter, URI as written)
    cluster_values: tuple[tuple[str, int], ...] = ()  # pinned @cluster values, if any
    tile_values: tuple[tuple[str, int], ...] = ()  # pinned leaf @autotune values, if any
    split: SplitRequest | None = None  # the cluster loop split over nodes, if pinned

    def uri(self, tensor: str) -> str:
        return dict(self.tensors)[tensor]


# ------------------------------------------------------------------------------------------
# URIs
# ------------------------------------------------------------------------------------------


def parse_uri(uri: str) -> FileUri:
    """A job's tensor URI: any storage URI (common/uri.py) naming a `.npy` file."""
    parsed = uri_module.parse_uri(uri)
    if not parsed.path.endswith(".npy"):
        raise UserError(f"storage URI {uri!r}: expected a .npy file")
    return parsed


resolve_uri = uri_module.absolute_uri
path_to_uri = uri_module.path_to_uri


# ------------------------------------------------------------------------------------------
# Building a job from the command line
# ------------------------------------------------------------------------------------------


def load_kernel(source: str, filename: str, name: str | None) -> ir.Kernel:
    """Parse and check `source`, returning the named kernel (or the only one)."""
    from compiler.frontend.diagnostics import register_source
    from compiler.frontend.load import load_text, select_kernel

    register_source(filename, source)
    return select_kernel(load_text(source, filename), name)


def required_dims(kernel: ir.Kernel) -> tuple[str, ...]:
    """Dimensions the job must give: every symbolic tensor dimension not fixed by @autotune."""
    from compiler.frontend.binding import kernel_dims

    at = kernel.autotune
    fixed = {d.name for d in at.dims} if at else set()
    return tuple(d for d in kernel_dims(kernel) if d not in fixed)


def check_against_kernel(job: Job, kernel: ir.Kernel) -> None:
    """Every dimension, scalar and tensor given exactly, nothing unknown, values sane."""
    from compiler.frontend.binding import kernel_dims

    all_dims = kernel_dims(kernel)
    dims = dict(job.dims)
    for name in dims:
        if name not in all_dims:
            raise UserError(f"kernel {kernel.name} has no dimension {name} "
                            f"(it has: {', '.join(all_dims) or 'none'})")
        if dims[name] < 1:
            raise UserError(f"dimension {name} = {dims[name]} must be at least 1")
    missing = [d for d in required_dims(kernel) if d not in dims]
    if missing:
        from compiler.frontend.binding import missing_dims_error

        raise missing_dims_error(kernel, missing)

    scalar_types = {s.name: s.dtype for s in kernel.scalars}
    scalars = dict(job.scalars)
    for name, value in scalars.items():
        if name not in scalar_types:
            raise UserError(f"kernel {kernel.name} has no scalar {name} "
                            f"(it has: {', '.join(scalar_types) or 'none'})")
        scalar_value(name, value, scalar_types[name])  # an i32 takes a whole number that fits
    missing = [s for s in scalar_types if s not in scalars]
    if missing:
        raise UserError(f"missing --scalar for {', '.join(missing)} (kernel {kernel.name})")

    tensor_names = [t.name for t in kernel.tensors]
    tensors = dict(job.tensors)
    for name, uri in tensors.items():
        if name not in tensor_names:
            raise UserError(f"kernel {kernel.name} has no tensor {name} "
                            f"(it has: {', '.join(tensor_names) or 'none'})")
        parse_uri(uri)
    missing = [t for t in tensor_names if t not in tensors]
    if missing:
        raise UserError(f"missing --tensor for {', '.join(missing)} (kernel {kernel.name})")

    # Values outside a search space are allowed (new-job and the run warn); unknown names are not.
    for flag, attribute, given in (("--cluster", kernel.cluster, job.cluster_values),
                                   ("--tile", kernel.autotune, job.tile_values)):
        names = [d.name for d in attribute.dims] if attribute else []
        what = "@cluster" if flag == "--cluster" else "@autotune"
        for name, value in given:
            if name not in names:
                raise UserError(f"{flag} {name}: kernel {kernel.name} has no {what} name {name} "
                                f"(it has: {', '.join(names) or 'none'})")
            if value < 1:
                raise UserError(f"{flag} {name}={value}: must be at least 1")


def build_job(kernel_path: Path, kernel_name: str | None, dims: dict[str, int], scalars: dict[str, float],
              tensors: dict[str, str], cluster_values: dict[str, int] | None = None,
              tile_values: dict[str, int] | None = None, job_dir: Path | None = None,
              split: SplitRequest | None = None) -> Job:
    """The job, checked against its kernel (`checked_job` returns the kernel too). With `job_dir`
    (the folder the job file goes to, which relative URIs start from) a dimension left out is
    taken from the shape of an existing tensor file (compiler.frontend.binding.dims_from_files),
    and outputs sharing a file are refused (check_tensor_files)."""
    source = _kernel_text(kernel_path)
    return job_from_source(source, str(kernel_path), kernel_name, dims, scalars, tensors, cluster_values,
                           job_dir, tile_values, split)


def checked_job(kernel_path: Path, kernel_name: str | None, dims: dict[str, int], scalars: dict[str, float],
                tensors: dict[str, str], cluster_values: dict[str, int] | None = None,
                tile_values: dict[str, int] | None = None, job_dir: Path | None = None,
                split: SplitRequest | None = None) -> tuple[Job, ir.Kernel]:
    """`build_job`, and the job's kernel as it parsed and checked it: the caller's later checks
    take that IR rather than parsing the source again."""
    source = _kernel_text(kernel_path)
    kernel = load_kernel(source, str(kernel_path), kernel_name)
    job = job_from_source(source, str(kernel_path), kernel_name, dims, scalars, tensors, cluster_values,
                          job_dir, tile_values, split, kernel=kernel)
    return job, kernel


def _kernel_text(kernel_path: Path) -> str:
    try:
        return kernel_path.read_text()
    except OSError as err:
        raise UserError(f"cannot read kernel file {kernel_path}: {err.strerror}") from None


def job_from_source(source: str, filename: str, kernel_name: str | None, dims: dict[str, int],
                    scalars: dict[str, float], tensors: dict[str, str],
                    cluster_values: dict[str, int] | None = None, job_dir: Path | None = None,
                    tile_values: dict[str, int] | None = None, split: SplitRequest | None = None,
                    given_dims: str = "--dim {name}={value}", kernel: ir.Kernel | None = None) -> Job:
    """`build_job` for kernel source already in memory (phobos.job builds jobs this way, saying
    `given_dims` how its dims were given, for the message of one that disagrees with a file).
    `kernel`: the named kernel of `source` as already parsed and checked (not parsed again)."""
    if kernel is None:
        kernel = load_kernel(source, filename, kernel_name)
    if job_dir is not None:
        from compiler.frontend.binding import dims_from_files

        dims = dims_from_files(kernel, dims, existing_shapes(tensors, job_dir), given_dims)
    job = Job(
        kernel_name=kernel.name,
        kernel_source=source,
        kernel_file=filename,
        dims=tuple(dims.items()),
        scalars=tuple((k, float(v)) for k, v in scalars.items()),
        tensors=tuple(tensors.items()),
        cluster_values=tuple((cluster_values or {}).items()),
        tile_values=tuple((tile_values or {}).items()),
        split=split,
    )
    check_against_kernel(job, kernel)
    if job_dir is not None:
        check_tensor_files(job, kernel, job_dir)
    return job


def existing_shapes(tensors: dict[str, str], job_dir: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """The shape of every tensor whose file exists (header only), with its URI as written."""
    from common.storage import tensor_meta

    out = {}
    for name, uri in tensors.items():
        path = Path(parse_uri(resolve_uri(uri, job_dir)).path)
        if path.is_file():
            out[name] = (tensor_meta(path)[0], uri)
    return out


def check_tensor_files(job: Job, kernel: ir.Kernel, job_dir: Path) -> None:
    """No output shares its file with another tensor (common.uri.check_distinct_files), with
    relative URIs taken from `job_dir`, the folder the job file is written to."""
    from compiler.frontend.walk import stored_tensors

    written = set(stored_tensors(kernel))
    everywhere = (Path("/"),)  # new-job confines nothing; the scheduler checks its storage roots
    places = [(name, uri_module.confine(text, everywhere, base=job_dir), name in written)
              for name, text in job.tensors]
    uri_module.check_distinct_files(places)


def job_kernel(job: Job, checked: ir.Kernel | None = None) -> ir.Kernel:
    """The job's kernel, parsed and checked, with errors pointing into the job's source text;
    `checked`, where the caller holds it already (parsed from this job's source), as it is."""
    if checked is not None:
        if checked.name != job.kernel_name or checked.span.file != (job.kernel_file or "<job>"):
            raise ValueError(f"kernel {checked.name} of {checked.span.file} is not the job's")
        return checked
    return load_kernel(job.kernel_source, job.kernel_file or "<job>", job.kernel_name)


# ------------------------------------------------------------------------------------------
# Reading and writing job files
# ------------------------------------------------------------------------------------------


def job_to_bytes(job: Job) -> bytes:
    from schemas.capnp_io import schema

    msg = schema("job.capnp").Job.new_message()
    msg.format = JOB_FORMAT
    msg.kernelName = job.kernel_name
    msg.kernelSource = job.kernel_source
    msg.kernelFile = job.kernel_file
    for field, items in (("dims", job.dims), ("clusterValues", job.cluster_values),
                         ("tileValues", job.tile_values)):
        lst = msg.init(field, len(items))
        for i, (name, value) in enumerate(items):
            lst[i].name = name
            lst[i].value = int(value)
    if job.split is not None:
        split = msg.init("split")
        split.shares, split.tree = job.split.shares, job.split.shape
        hosts = split.init("hosts", len(job.split.hosts))
        for i, n in enumerate(job.split.hosts):
            hosts[i] = n
    lst = msg.init("scalars", len(job.scalars))
    for i, (name, value) in enumerate(job.scalars):
        lst[i].name = name
        lst[i].value = float(value)
    lst = msg.init("tensors", len(job.tensors))
    for i, (name, uri) in enumerate(job.tensors):
        lst[i].name = name
        lst[i].uri = uri
    return msg.to_bytes()


def job_from_bytes(data: bytes, where: str = "<job>") -> Job:
    from schemas.capnp_io import read_message, schema

    try:
        # Limits keep a corrupt or hostile file from making us walk gigabytes of pointers.
        with read_message(schema("job.capnp").Job, data) as msg:
            if msg.format != JOB_FORMAT:
                raise UserError(f"{where}: job format {msg.format} is not supported (expected {JOB_FORMAT})")
            return Job(
                kernel_name=msg.kernelName,
                kernel_source=msg.kernelSource,
                kernel_file=msg.kernelFile,
                dims=tuple((d.name, d.value) for d in msg.dims),
                scalars=tuple((s.name, s.value) for s in msg.scalars),
                tensors=tuple((t.name, t.uri) for t in msg.tensors),
                cluster_values=tuple((d.name, d.value) for d in msg.clusterValues),
                tile_values=tuple((d.name, d.value) for d in msg.tileValues),
                split=_split_of(msg),
            )
    except UserError:
        raise
    except Exception as err:  # pycapnp raises KjException and friends for malformed bytes
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{where}: not a valid job file ({first[:200]})") from None


def _split_of(msg) -> SplitRequest | None:
    if not msg._has("split") or msg.split.shares == 0:
        return None
    return SplitRequest(msg.split.shares, msg.split.tree, tuple(msg.split.hosts))


def write_job(job: Job, path: Path) -> None:
    write_atomically(path, job_to_bytes(job), durable=True)


def read_job(path: Path) -> Job:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read job file {path}: {err.strerror}") from None
    return job_from_bytes(data, str(path))


def render_job(job: Job, path: Path | None = None) -> str:
    """The job as readable text (`show-job`), with relative URIs shown resolved too."""
    lines = [f"job {path}" if path else "job", f"  kernel   {job.kernel_name}  (from {job.kernel_file})"]
    for title, items in (("dims", job.dims), ("cluster", job.cluster_values), ("tiles", job.tile_values),
                         ("scalars", job.scalars)):
        if items:
            lines.append(f"  {title:<8} " + "  ".join(f"{k}={_fmt(v)}" for k, v in items))
    if job.split is not None:
        lines.append(f"  split    {split_label(job.split)}")
    if job.tensors:
        lines.append("  tensors")
        width = max(len(name) for name, _ in job.tensors)
        for name, uri in job.tensors:
            line = f"    {name:<{width}}  {uri}"
            parsed = parse_uri(uri)
            if parsed.relative and path is not None:
                line += f"  -> {resolve_uri(uri, Path(path).resolve().parent)}"
            lines.append(line)
    lines.append("  source")
    lines.extend("    | " + text for text in job.kernel_source.rstrip("\n").splitlines())
    return "\n".join(lines)


def split_label(split: SplitRequest) -> str:
    """`4 shares, binary tree` (and the hosts' share counts for a tree by hosts)."""
    hosts = f" ({','.join(map(str, split.hosts))} per host)" if split.hosts else ""
    return f"{split.shares} shares, {split.shape} tree{hosts}"


def _fmt(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)
