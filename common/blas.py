"""How many threads numpy's BLAS starts in each of our processes: one home for the setting.

numpy's BLAS (OpenBLAS in the wheels, MKL or an OpenMP build elsewhere) reads its thread count
from the environment once, when numpy is first imported, and starts that many threads, which
spin for about 0.1 s of CPU before they sleep. Measured on the 2-core machine: `import numpy`
takes 0.20-0.26 s of CPU with the default (one thread per core) and 0.11-0.16 s with one, and
a command's own numpy import spinning the second core slowed the local pod starting beside it
(the command reached its pods 0.05-0.1 s later).

- `phobos-sched` itself multiplies no matrices: it runs with one thread (`one_thread_here`,
  before numpy loads). The values the user set are kept for the pods it starts
  (`user_environment`).
- Local pods: a CPU pod's share of the host's cores is divided among its compute workers, which
  run launches side by side (each BLAS library would otherwise start a thread per core in every
  pod and every worker would use them all; oversubscribed cores made the same job's time vary
  twofold, benchmarks/model_validation.py, and a CPU pod's start-up spun a second core for
  0.04 s of the command's time to its pods); GPU pods get one, as their products run on the GPU.
  A value the user set is kept (`pod_threads`).
"""

from __future__ import annotations

import os
import sys

from common import options

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# A pod's compute workers: the launches it runs side by side (pod/runtime.py sizes its pool here).
POD_COMPUTE_WORKERS = {"cpu": 2, "gpu": 4}
_USERS: dict[str, str | None] = {}  # the user's values, before one_thread_here set this process's


def one_thread_here() -> None:
    """One BLAS thread for this process, which does no linear algebra of size. Only before numpy
    is imported: afterwards the threads exist and the environment would only mislead children."""
    if "numpy" in sys.modules:
        return
    for name in THREAD_VARIABLES:
        _USERS.setdefault(name, options.variable(name))
        options.set_variable(name, "1")


def user_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` (a copy of os.environ) with the user's own settings back in place of this process's."""
    out = dict(env)
    for name, value in _USERS.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def pod_threads(devices: list[str], env: dict[str, str]) -> dict[str, str]:
    """The settings for local pods on `devices` ("cpu" or a GPU number) started with `env`
    (the user's environment): each CPU pod's share of the host's cores divided among its compute
    workers, one thread for GPU pods; names the user set are left out, so their values stand."""
    cpu_pods = sum(1 for d in devices if d == "cpu")
    per_pod = 1
    if cpu_pods:
        per_pod = max(1, (os.cpu_count() or 1) // cpu_pods // POD_COMPUTE_WORKERS["cpu"])
    return {name: str(per_pod) for name in THREAD_VARIABLES if name not in env}
