"""A pod killed in the middle of a split reduction (issue 17): four CPU pods run a split-K matmul
(4 shares, binary tree: 0 <- 1 and 2 <- 3, then 0 <- 2) or a split-KV decode (flat tree); one pod
SIGKILLs itself (PHOBOS_FAULT) at a point inside the tree, chosen by event, not by time:

    serve:1      share 2's node, when the root asks for its merged partial (round 2)
    serve:1      share 3's node, when share 2's node asks for its partial (round 1): share 2 can
                 never merge, so the root's fetch of its merged partial is refused at once (not
                 blamed on node 2) and the unit is re-planned whole
    fetch:1      the root, at its first fetch of a partial (round 1)
    compute:N    the decode's root, at its first merge (after its init and steps)

The scheduler re-plans the unit (its output was not stored) over the three pods left: still four
shares, so one node runs two, and the same tree. The output must be bitwise equal to the
failure-free run's: the shares, the merges and their order are the program's, not the placement's,
and the CPU backend is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from common.paths import repo_file
from compiler.cluster.tree import SplitRequest
from scheduler.jobs.jobfile import build_job, read_job, write_job
from scheduler.jobs.prepare import prepare
from scheduler.planning.planner import NodeFigure, plan
from schemas.instructions import Compute
from tests.faults.harness import Pods, staging_files

MATMUL = {"M": 256, "N": 256, "K": 16384}
DECODE = {"G": 8, "D": 128, "S": 4 * 4096 + 300}  # 4 full chunks of 4096 keys and a ragged fifth


def _inputs(root):
    rng = np.random.default_rng(17)
    arrays = {"A": (256, 16384), "B": (16384, 256), "Q": (8, 128), "K": (DECODE["S"], 128),
              "V": (DECODE["S"], 128)}
    for name, shape in arrays.items():
        np.save(root / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
    np.save(root / "C0.npy", rng.standard_normal((256, 256)).astype(np.float32))


def _job(root, which: str, out: str):
    if which == "matmul":
        kernel, dims = repo_file("examples/jobs/matmul_split_k.phk"), MATMUL
        scalars = {"alpha": 1.0, "beta": 0.5}
        tensors, cluster = {"A": "A", "B": "B", "C": out}, {"TILE_K": 4096}
        split = SplitRequest(4, "binary")
        (root / f"{out}.npy").write_bytes((root / "C0.npy").read_bytes())  # beta * C reads it
    else:
        kernel, dims, scalars = _decode_kernel(root), DECODE, {"scale": 0.09}
        tensors, cluster = {"Q": "Q", "K": "K", "V": "V", "O": out}, {"BS": 4096}
        split = SplitRequest(4, "flat")
    job = build_job(kernel, None, dims, scalars, {t: f"file:{s}.npy" for t, s in tensors.items()},
                    cluster_values=cluster, split=split)
    path = root / f"{out}.capnp"
    write_job(job, path)
    return path


def _decode_kernel(root):
    """examples/decode_gqa.phk at D = 128 with chunks of 4096 keys (the example's @cluster range
    starts at 65536), so that the job is small."""
    text = repo_file("examples/decode_gqa.phk").read_text().replace("@cluster(BS in [65536, 1048576])",
                                                                      "@cluster(BS in [4096, 8192])")
    path = root / "decode_small.phk"
    path.write_text(text)
    return path


def _first_merge(root, job) -> int:
    """The root's compute count up to its first merge (init, its steps, then the merge)."""
    prepared = prepare(read_job(job), job, [root])
    first = plan(prepared.program, [NodeFigure(n) for n in range(4)], prepared.uris)
    computes = [i for i in first.node_plans[first.placement[0]].instructions if isinstance(i, Compute)]
    return next(n for n, c in enumerate(computes, 1) if c.leaf.startswith("merge"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("split-kill")
    _inputs(root)
    pods = Pods(root, root / "logs")
    pods.start(3)
    clean = {}
    for which, tensor in (("matmul", "C"), ("decode", "O")):
        job = _job(root, which, f"{tensor}_clean")
        result = pods.run(pods.session(pods.healthy() + pods.start(1)), job)
        assert result.ok and not result.trace["failures"], result.reason
        clean[which] = np.load(root / f"{tensor}_clean.npy")
    yield root, pods, clean
    pods.close()


@pytest.mark.parametrize("which,node,fault", [
    ("matmul", 2, "kill-at=serve:1"),
    ("matmul", 3, "kill-at=serve:1"),
    ("matmul", 0, "kill-at=fetch:1"),
    ("decode", 0, "merge"),
])
def test_a_pod_killed_mid_reduction_gives_the_failure_free_bits(cluster, which, node, fault):
    root, pods, clean = cluster
    out = f"{'C' if which == 'matmul' else 'O'}_{node}_{fault.split('=')[-1].replace(':', '')}"
    job = _job(root, which, out)
    if fault == "merge":
        fault = f"kill-at=compute:{_first_merge(root, job)}"
    healthy = pods.healthy()
    while len(healthy) < 3:
        healthy += pods.start(1)
    faulty = pods.start(1, fault=fault)[0]
    order = healthy[:3]
    order.insert(node, faulty)
    result = pods.run(pods.session(order), job)
    assert pods.wait_exit(faulty, 10) is not None, "the faulty pod did not die"
    assert result.ok, result.reason
    assert [f["node"] for f in result.trace["failures"]] == [node]
    replanned = [e for e in result.trace["events"] if e["generation"] > 1 and e["kind"] == "compute"]
    assert any(e["leaf"].startswith("merge") for e in replanned)  # the tree ran again
    np.testing.assert_array_equal(np.load(root / f"{out}.npy"), clean[which])
    assert staging_files(root) == []
