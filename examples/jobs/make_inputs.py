"""Make the example jobs: their inputs, the numpy-expected output and the job files, deterministically.

    PYTHONPATH=. .venv/bin/python examples/jobs/make_inputs.py

writes examples/jobs/data/{A,B,C_expected}.npy and examples/jobs/matmul.capnp (URIs relative to
the job file: file:data/A.npy, file:data/B.npy, file:out/C.npy). Then run it with

    tools/bazel run //scheduler -- examples/jobs/matmul.capnp --expect C=examples/jobs/data/C_expected.npy

The split-K job (examples/jobs/matmul_split_k.capnp: M = N = 256, K = 65536, its K loop split over 4
shares by a binary tree, docs/cluster.md) is committed; its 128 MiB of inputs are not:

    PYTHONPATH=. .venv/bin/python examples/jobs/make_inputs.py --split-k
    tools/bazel run //scheduler -- examples/jobs/matmul_split_k.capnp --local-pods 4 \
        --expect C=examples/jobs/out/C_split_k_expected.npy

writes them to examples/jobs/out/ (git-ignored). Their values are multiples of 1/8 in [-1, 1), so
every partial sum is a multiple of 1/64 below 2^16 in size: exact in f32, whatever the order of
the additions, and the split job's output equals numpy's bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for `scheduler` and `compiler`

M = N = K = 512
SEED = 20261129
SPLIT_K = {"M": 256, "N": 256, "K": 65536}


def make_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    # Values in [-1, 1) rounded to multiples of 1/64: exact in f32, sums of 512 products stay
    # well inside f32's exact range, so the expected output hardly depends on summation order.
    a = (np.floor(rng.uniform(-64, 64, (M, K))) / 64).astype(np.float32)
    b = (np.floor(rng.uniform(-64, 64, (K, N))) / 64).astype(np.float32)
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    return {"A": a, "B": b, "C_expected": expected}


def split_k_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED + 1)
    m, n, k = SPLIT_K["M"], SPLIT_K["N"], SPLIT_K["K"]
    a = (np.floor(rng.uniform(-8, 8, (m, k))) / 8).astype(np.float32)
    b = (np.floor(rng.uniform(-8, 8, (k, n))) / 8).astype(np.float32)
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    return {"A_split_k": a, "B_split_k": b, "C_split_k": np.zeros((m, n), np.float32),
            "C_split_k_expected": expected}


def split_k_job():
    from compiler.cluster.tree import SplitRequest
    from scheduler.jobs.jobfile import build_job

    tensors = {t: f"file:out/{t}_split_k.npy" for t in "ABC"}
    job = build_job(HERE / "matmul_split_k.phk", None, SPLIT_K, {"alpha": 1.0, "beta": 0.0}, tensors,
                    cluster_values={"TILE_K": 4096}, split=SplitRequest(4, "binary"))
    return type(job)(**{**job.__dict__, "kernel_file": "examples/jobs/matmul_split_k.phk"})


def save_arrays(arrays: dict[str, np.ndarray], folder: Path) -> list[Path]:
    """Each array as folder/NAME.npy; the paths written, in order."""
    folder.mkdir(exist_ok=True)
    written = []
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)
        written.append(folder / f"{name}.npy")
    return written


def wrote_line(paths: list[Path]) -> str:
    """What was written, named as the files are (their folder once)."""
    return f"wrote {paths[0].parent}/: {', '.join(p.name for p in paths)}"


def main() -> None:
    from scheduler.jobs.jobfile import build_job, write_job

    if sys.argv[1:] == ["--split-k"]:
        written = save_arrays(split_k_arrays(), HERE / "out")
        write_job(split_k_job(), HERE / "matmul_split_k.capnp")
        print(f"{wrote_line(written)} and {HERE / 'matmul_split_k.capnp'}")
        return
    written = save_arrays(make_arrays(), HERE / "data")
    (HERE / "out").mkdir(exist_ok=True)
    job = build_job(HERE / "matmul_plain.phk", None, {"M": M, "N": N, "K": K}, {},
                    {"A": "file:data/A.npy", "B": "file:data/B.npy", "C": "file:out/C.npy"})
    # The job records where its kernel came from for messages; keep it relative to the repo.
    job = type(job)(**{**job.__dict__, "kernel_file": "examples/jobs/matmul_plain.phk"})
    write_job(job, HERE / "matmul.capnp")
    print(f"{wrote_line(written)} and {HERE / 'matmul.capnp'}")


if __name__ == "__main__":
    main()
