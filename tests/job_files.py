"""Job files and inputs for the tests that run jobs on real pods (tests/runtime, tests/faults)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scheduler.jobfile import build_job, write_job

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
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
