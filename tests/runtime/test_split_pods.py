"""Split reductions end to end on four real CPU pods (`phobos-sched JOB --local-pods 4`, real
processes, loopback RPC, .npy files): the split-K example job (M = N = 256, K = 65536) computes on
all four nodes and equals numpy; split-KV decode G = 8, D = 128, S = 2^20 matches a float64
reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.job_files import EXAMPLES, JOB_KERNELS

REPO = Path(__file__).resolve().parents[2]


def _sched(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "scheduler.main", *argv], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


def _run(folder: Path, kernel: Path, dims: dict, scalars: dict, tensors: list[str], split: list[str]) -> dict:
    flags = [f"--dim={k}={v}" for k, v in dims.items()] + [f"--scalar={k}={v}" for k, v in scalars.items()]
    flags += [f"--tensor={t}=file:{t}.npy" for t in tensors]
    made = _sched(folder, "new-job", str(kernel), *flags, *split, "-o", "job.capnp")
    assert made.returncode == 0, made.stderr
    ran = _sched(folder, "job.capnp", "--local-pods", "4", "--trace", "trace.json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads((folder / "trace.json").read_text())


def _computing_nodes(trace: dict) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for e in trace["events"]:
        if e["kind"] == "compute":
            out.setdefault(e["node"], set()).add(e["leaf"].split("@")[0])
    return out


def test_the_split_k_example_job_on_four_pods(tmp_path):
    """examples/jobs/matmul_split_k.capnp as committed (M = N = 256, K = 65536, 4 shares, binary
    tree), its inputs from make_inputs.py: values exact in f32 in any order of additions, so the
    output must equal numpy's bit for bit."""
    sys.path.insert(0, str(JOB_KERNELS))
    import make_inputs

    shutil.copy(JOB_KERNELS / "matmul_split_k.capnp", tmp_path / "job.capnp")
    (tmp_path / "out").mkdir()
    for name, array in make_inputs.split_k_arrays().items():
        np.save(tmp_path / "out" / f"{name}.npy", array)
    ran = _sched(tmp_path, "job.capnp", "--local-pods", "4", "--trace", "trace.json",
                 "--expect", "C=out/C_split_k_expected.npy")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    head = "(matmul_split_k, 1 unit, each split over 4 shares (binary tree) on 4 nodes) succeeded"
    assert head in ran.stdout
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["job"]["reduction"] == {"form": "sum", "shares": 4, "tree": "binary", "hosts": []}
    # One output super-tile, its 16 chunks of K in four shares: every node runs steps.
    leaves = _computing_nodes(trace)
    assert sorted(leaves) == [0, 1, 2, 3] and all("step" in v for v in leaves.values())
    assert sum("merge" in v for v in leaves.values()) == 2  # binary: the root and share 2 merge
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "C_split_k.npy"),
                                  np.load(tmp_path / "out" / "C_split_k_expected.npy"))


def test_split_kv_decode_on_four_pods(tmp_path):
    g, d, s = 8, 128, 1 << 20
    rng = np.random.default_rng(4)
    q = rng.standard_normal((g, d)).astype(np.float32)
    kk = rng.standard_normal((s, d)).astype(np.float32)
    v = rng.standard_normal((s, d)).astype(np.float32)
    for name, x in (("Q", q), ("K", kk), ("V", v)):
        np.save(tmp_path / f"{name}.npy", x)
    del kk, v
    scale = 1 / np.sqrt(d)
    trace = _run(tmp_path, EXAMPLES / "decode_gqa.phk", {"G": g, "D": d, "S": s}, {"scale": scale},
                 ["Q", "K", "V", "O"], ["--split", "4", "--tree", "binary"])
    assert sorted(_computing_nodes(trace)) == [0, 1, 2, 3]
    k64 = np.load(tmp_path / "K.npy", mmap_mode="r")
    v64 = np.load(tmp_path / "V.npy", mmap_mode="r")
    scores = np.concatenate([q.astype(np.float64) @ k64[i:i + 65536].astype(np.float64).T
                             for i in range(0, s, 65536)], axis=1) * scale
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    ref = sum(p[:, i:i + 65536] @ v64[i:i + 65536].astype(np.float64) for i in range(0, s, 65536))
    ref /= p.sum(axis=1, keepdims=True)
    got = np.load(tmp_path / "O.npy")
    # |O| ~ 1e-3 (an average of 2^20 unit normals); f32 scores and exps: relative error ~1e-6
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.max(np.abs(ref)))
