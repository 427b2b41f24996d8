"""Job files and inputs for the tests that run jobs on real pods (tests/runtime, tests/faults)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.paths import repo_file
from scheduler.jobfile import build_job, write_job

# Not resolved: under Bazel that would lead out of the runfiles tree into the checkout, and what
# the tests write there (make_inputs.py's bytecode) would change the //examples filegroup.
EXAMPLES = repo_file("examples")
JOB_KERNELS = EXAMPLES / "jobs"


def make_job(folder: Path, kernel: str, dims: dict[str, int], tensors: dict[str, str],
             scalars: dict[str, float] | None = None, name: str = "job") -> Path:
    """A job file in `folder`; `tensors` maps each tensor to its .npy file's stem in `folder`."""
    job = build_job(JOB_KERNELS / f"{kernel}.phk", None, dims, scalars or {},
                    {t: f"file:{stem}.npy" for t, stem in tensors.items()})
    path = folder / f"{name}.capnp"
    write_job(job, path)
    return path


def write_inputs(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
