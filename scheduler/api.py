"""Cluster jobs from a program: build a job, run it on pods, get a `JobResult` back.

The same stages as `phobos-sched JOB` (which calls `prepare` and `run_prepared` below):
scheduler/jobs/prepare.py (parse the kernel once, compile the cluster program, check storage), then
scheduler/running/run.py (pods, plans, staging, commit). `run` blocks; `run_async` is for callers that
already run an event loop: the job runs on its own loop in a thread (pycapnp's RPC needs a loop
of its own), and cancelling the awaiting task stops the job in order, as Ctrl-C does on the
command line: the pods are told to drop it, staging files are removed, outputs keep their
previous contents, then CancelledError reaches the caller. A blocking `run` in the main thread
handles SIGINT/SIGTERM as the command line does (scheduler/running/interrupt.py): `Interrupted` is raised.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common import options as env_options
from common.errors import Error, UserError, as_error, user_errors

if TYPE_CHECKING:  # imported by `job`: a job file's run (phobos-sched JOB) needs no phobos.Kernel
    from compiler.api.kernel import Kernel


class ClusterJob:
    """A job: a kernel (its source travels inside), dimensions, scalars, one storage URI per
    tensor. Relative `file:` URIs start from `base_dir`: the job file's folder for a loaded job."""

    def __init__(self, job, base_dir: Path, kernel=None):
        self._job = job  # scheduler.jobs.jobfile.Job
        self.base_dir = Path(base_dir).resolve()
        self._kernel = kernel  # the job's kernel, checked, where phobos.job parsed it (else None)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ClusterJob:
        """A job file written by `save` or by `phobos-sched new-job`."""
        from scheduler.jobs.jobfile import read_job

        with user_errors():
            return cls(read_job(Path(path)), Path(path).resolve().parent)

    def save(self, path: str | os.PathLike) -> None:
        """Write the job file (the bytes `phobos-sched new-job` writes for the same job)."""
        from scheduler.jobs.jobfile import write_job

        with user_errors():
            write_job(self._job, Path(path))

    @property
    def kernel_name(self) -> str:
        return self._job.kernel_name

    @property
    def dims(self) -> dict[str, int]:
        return dict(self._job.dims)

    @property
    def scalars(self) -> dict[str, float]:
        return dict(self._job.scalars)

    @property
    def tensors(self) -> dict[str, str]:
        return dict(self._job.tensors)

    def __str__(self) -> str:
        from scheduler.jobs.jobfile import render_job

        return render_job(self._job)


def job(kernel: Kernel | str | os.PathLike, *, tensors: Mapping[str, str | os.PathLike],
        dims: Mapping[str, int] | None = None, scalars: Mapping[str, float] | None = None,
        cluster_values: Mapping[str, int] | None = None, tile_values: Mapping[str, int] | None = None,
        base_dir: str | os.PathLike | None = None, split: int | None = None, tree: str = "flat",
        hosts: tuple[int, ...] = ()) -> ClusterJob:
    """A job for `kernel` (a phobos.Kernel, or the path of a .phk file with one kernel). `tensors`
    maps every tensor parameter to a `file:` URI or a path; `dims` defaults to the kernel's
    pinned dims (a dimension left out is read from an existing tensor file's shape, as
    `phobos-sched new-job` does); `cluster_values` pins @cluster values and `tile_values` the
    leaves' @autotune values (new-job's --cluster and --tile; default: the kernel's pinned
    tiles); `split` cuts the cluster loop's chunks into that many shares, one per node, merged by a
    `tree` ("flat", "binary", or "hosts" with `hosts` the shares per host), as new-job's --split,
    --tree and --hosts (docs/cluster.md); `base_dir` (default: the working folder) is where
    relative URIs start. Checked as
    `phobos-sched new-job` checks it: a job that can never run is an Error; new-job's warnings
    (values outside a search space, a file the kernel reads that does not exist yet) are
    `UserWarning`s."""
    from compiler.api.kernel import Kernel, load
    from scheduler.jobs.jobfile import job_from_source, path_to_uri
    from scheduler.jobs.prepare import check_new_job

    if not isinstance(kernel, Kernel):
        kernel = load(kernel)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    uris = {name: value if isinstance(value, str) else path_to_uri(Path(os.path.abspath(value)))
            for name, value in tensors.items()}
    with user_errors():
        from compiler.cluster.tree import SplitRequest

        request = SplitRequest(split, tree, tuple(hosts)) if split is not None else None
        built = job_from_source(kernel.source, kernel.file, kernel.name,
                                dict(kernel.dims if dims is None else dims), dict(scalars or {}), uris,
                                dict(cluster_values or {}), job_dir=base,
                                tile_values=dict(kernel.tiles if tile_values is None else tile_values),
                                given_dims="dims={{'{name}': {value}}}", split=request, kernel=kernel.ir)
        for line in check_new_job(built, base / "job", kernel.ir):
            warnings.warn(line.removeprefix("warning: "), UserWarning, stacklevel=2)
    return ClusterJob(built, base, kernel.ir)


@dataclass(frozen=True)
class JobResult:
    """How a job ended. `ok`: its outputs were committed; `reason`: why not; `trace`: every
    instruction's start and end per node, the nodes, units and failures (the --trace file)."""

    ok: bool
    reason: str
    wall_s: float
    trace: dict
    outputs: dict[str, Path]

    @property
    def summary(self) -> str:
        """The text `phobos-sched` prints after a run."""
        from scheduler.tracing.tracefile import summary_text

        return summary_text(self.trace, self.ok, self.reason)

    @property
    def failures(self) -> list[dict]:
        """Nodes lost during the run, each {node, time, reason}; their work was re-planned."""
        return list(self.trace["failures"])

    @property
    def job_id(self) -> str:
        return self.trace["job"]["id"]


def prepare(cluster_job: ClusterJob, storage_roots=None, cluster_values: Mapping[str, int] | None = None,
            tile_values: Mapping[str, int] | None = None, any_values: bool = False, split=None):
    """scheduler.jobs.prepare.prepare for this job (the command line's prepare, too): `cluster_values`,
    `tile_values` and `split` (a SplitRequest) override the job's; `any_values` (--autotune) lets
    the tuner choose."""
    from scheduler.jobs.prepare import prepare as prepare_job

    roots = [Path(r) for r in storage_roots] if storage_roots else [Path.cwd(), cluster_job.base_dir]
    for root in roots:
        if not root.is_dir():
            msg = f"storage root {root}: not a directory"
            raise Error(f"error: {msg}", msg)
    with user_errors():
        return prepare_job(cluster_job._job, cluster_job.base_dir / "job", roots, dict(cluster_values or {}),
                           tile_values=dict(tile_values or {}), any_values=any_values, split=split,
                           kernel=cluster_job._kernel)


def options(*, pods=(), local_pods: int | None = None, token: str | None = None, storage_roots=(),
            heartbeat_interval: float = 0.5, heartbeat_timeout: float = 5.0,
            cluster_values: Mapping[str, int] | None = None, pod_log_level: str = "warning"):
    from scheduler.running.run import RunOptions

    if local_pods is not None and pods:
        raise Error("error: local_pods and pods exclude each other", "local_pods and pods exclude each other")
    if pods and not token:
        from common.cluster_token import TOKEN_ENV

        token = env_options.current().token
        if not token:
            msg = f"pods need the cluster's token: pass token= or set {TOKEN_ENV}"
            raise Error(f"error: {msg}", msg)
    return RunOptions(pods=tuple(pods), local_pods=local_pods, token=token,
                      storage_roots=tuple(Path(r) for r in storage_roots),
                      heartbeat_interval=heartbeat_interval, heartbeat_timeout=heartbeat_timeout,
                      cluster_values=dict(cluster_values or {}), pod_log_level=pod_log_level)


def _result(prepared, run_result) -> JobResult:
    return JobResult(run_result.ok, run_result.reason, run_result.wall_s, run_result.trace,
                     {t.name: t.path for t in prepared.outputs})


def run_prepared(prepared, run_options) -> JobResult:
    """Run to the end. In the main thread, SIGINT/SIGTERM stop the job in order and raise
    scheduler.running.interrupt.Interrupted, as on the command line; elsewhere signals are the caller's."""
    from scheduler.running.run import run_job

    with user_errors():
        if threading.current_thread() is threading.main_thread():
            return _result(prepared, run_job(prepared, run_options))
        return _result(prepared, _Background(prepared, run_options).run())


async def run_prepared_async(prepared, run_options) -> JobResult:
    background = _Background(prepared, run_options)
    done: concurrent.futures.Future = concurrent.futures.Future()

    def work() -> None:
        try:
            done.set_result(background.run())
        except BaseException as err:  # handed to the awaiting task, whatever it is
            done.set_exception(err)

    threading.Thread(target=work, name=f"phobos-job-{prepared.job_id}", daemon=True).start()
    waiting = asyncio.wrap_future(done)
    try:
        outcome = await asyncio.shield(waiting)
    except asyncio.CancelledError:
        background.cancel()
        try:  # the orderly stop: pods told, staging removed, local pods stopped
            await waiting
        except BaseException:  # noqa: S110 - the job's own end is not the caller's concern now
            pass
        raise
    except UserError as err:
        raise as_error(err) from None
    return _result(prepared, outcome)


class _Background:
    """A job on an event loop of its own, in the calling thread; `cancel` may come from any thread."""

    def __init__(self, prepared, run_options):
        self.prepared = prepared
        self.options = run_options
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._cancelled = False

    def run(self):
        from schemas import rpc_streams

        return rpc_streams.run(self._main())

    async def _main(self):
        from scheduler.running.run import run_with_pods

        with self._lock:
            if self._cancelled:
                raise asyncio.CancelledError
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
        return await run_with_pods(self.prepared, self.options)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)


def run(cluster_job: ClusterJob, *, pods=(), local_pods: int | None = None, token: str | None = None,
        storage_roots=None, cluster_values: Mapping[str, int] | None = None,
        tile_values: Mapping[str, int] | None = None, heartbeat_interval: float = 0.5,
        heartbeat_timeout: float = 5.0, pod_log_level: str = "warning") -> JobResult:
    """Run `cluster_job` on the pods at `pods` (HOST:PORT, with the cluster's `token`), or on
    local pods started for it (`local_pods` of them; default one per GPU, else two CPU pods).
    `cluster_values` and `tile_values` override the job's, as --cluster and --tile do."""
    prepared, run_options = _prepare_with_options(**locals())
    return run_prepared(prepared, run_options)


async def run_async(cluster_job: ClusterJob, *, pods=(), local_pods: int | None = None,
                    token: str | None = None, storage_roots=None,
                    cluster_values: Mapping[str, int] | None = None,
                    tile_values: Mapping[str, int] | None = None, heartbeat_interval: float = 0.5,
                    heartbeat_timeout: float = 5.0,
                    pod_log_level: str = "warning") -> JobResult:
    """`run` for a caller inside an event loop; cancel the task to stop the job in order."""
    prepared, run_options = await asyncio.to_thread(_prepare_with_options, **locals())
    return await run_prepared_async(prepared, run_options)


def _prepare_with_options(cluster_job: ClusterJob, storage_roots, cluster_values, tile_values, **rest):
    roots = [Path(r) for r in storage_roots] if storage_roots else [Path.cwd(), cluster_job.base_dir]
    run_options = options(storage_roots=roots, cluster_values=cluster_values, **rest)  # refused first
    return prepare(cluster_job, roots, cluster_values, tile_values=tile_values), run_options
