"""phobos from a Python program: call a kernel on arrays, run a cluster job.

The names below are the public, stable API (docs/python.md); everything else (compiler/,
scheduler/, pod/, schemas/, common/) is internal. This package only names the API: the kernel
half lives in compiler/api/, the cluster half in scheduler/api.py, the errors in common/errors.py,
so that the command lines, which call the same code, never import upwards.

    kernel = phobos.load("examples/matmul.phk")         # or phobos.from_source(text)
    kernel(A, B, C, alpha=1.0, beta=0.0)                 # numpy: interpreter; torch/cupy on GPU: CUDA

    job = phobos.job("examples/jobs/matmul.phk", dims={"M": 512, ...}, tensors={"A": "file:a.npy", ...})
    result = phobos.run(job)                             # or: await phobos.run_async(job)
"""

from common import log as _log
from common.errors import ArrayError, Error
from compiler.api.kernel import Kernel, from_source, load
from scheduler.api import ClusterJob, JobResult, job, run, run_async
from scheduler.running.interrupt import Interrupted

__all__ = [
    "ArrayError",
    "ClusterJob",
    "Error",
    "Interrupted",
    "JobFailed",
    "JobResult",
    "Kernel",
    "from_source",
    "job",
    "load",
    "run",
    "run_async",
]

_log.configure_for_library()  # phobos's own events: warnings and errors, on stderr


def __getattr__(name: str):
    # scheduler.running.run brings the whole runtime (capnp, the planner): imported when first asked for,
    # so that `compiler run`, which calls phobos.Kernel, starts as fast as before.
    if name == "JobFailed":
        from scheduler.running.run import JobFailed

        return JobFailed
    raise AttributeError(f"module 'phobos' has no attribute {name!r}")
