"""The kill matrix (issue 7): 4 CPU pods run a 16-unit matmul; in each of 30 seeded runs one pod
SIGKILLs itself (PHOBOS_FAULT, a real SIGKILL of a real process) when it starts its n-th
instruction of one kind: allocate, load, fetch, compute, store, free (5 runs each), at a node and
an n drawn from the seed out of what that node's first plan holds. Every run must succeed with the
output bitwise equal to the failure-free run's, and leave no staging file.

Bitwise, not a tolerance: a re-planned unit runs the same leaf launches on the same f32 tiles
(loaded again from the same file) in the same order, and the CPU backend is deterministic.
tools/soak_faults.py runs the same matrix over many more seeds.
"""

from __future__ import annotations

import random
import signal

import numpy as np
import pytest

from tests.faults.harness import Pods, instruction_counts, matmul_inputs, staging_files
from tests.job_files import make_job

KINDS = ("allocate", "load", "fetch", "compute", "store", "free")
RUNS = 30
M, N, K = 512, 512, 256
CLUSTER = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 128}
DIMS = {"M": M, "N": N, "K": K}


def choose_fault(seed: int, counts: dict[int, dict[str, int]]) -> tuple[int, str, int]:
    """(node, kind, n) for run `seed`: kinds in turn, node and n drawn from the seed."""
    rng = random.Random(seed)
    kind = KINDS[seed % len(KINDS)]
    nodes = [n for n in sorted(counts) if counts[n].get(kind, 0) > 0]
    node = rng.choice(nodes)
    return node, kind, rng.randint(1, counts[node][kind])


class Matrix:
    """Three healthy pods kept across runs plus one fresh faulty pod per run."""

    def __init__(self, root, logs):
        self.root = root
        self.order: list = []  # the pods of the last run, by node (also set by tools/soak_faults.py)
        matmul_inputs(root, M, N, K, seed=1)
        self.pods = Pods(root, logs)
        self.pods.start(4)
        job = make_job(root, "matmul_plain", DIMS, {"A": "A", "B": "B", "C": "C_clean"}, name="clean")
        clean = self.pods.run(self.pods.session(self.pods.healthy()), job, CLUSTER)
        assert clean.ok and not clean.trace["failures"], clean.reason
        self.expected = np.load(root / "C_clean.npy")
        a, b = np.load(root / "A.npy"), np.load(root / "B.npy")
        # f32 sums of 256 products in another order: ~256 * 2^-24 relative to the row norms
        np.testing.assert_allclose(self.expected, a @ b, rtol=1e-4, atol=1e-3)
        self.counts = instruction_counts(job, root, 4, CLUSTER)
        self.pods.healthy()[3].signal(signal.SIGTERM)  # keep three; each run adds a faulty one
        self.pods.wait_exit(self.pods.healthy()[3], 10)

    def run(self, seed: int):
        node, kind, n = choose_fault(seed, self.counts)
        healthy = self.pods.healthy()
        while len(healthy) < 3:  # a healthy pod wrongly declared dead exits: replace it
            healthy += self.pods.start(1)
        faulty = self.pods.start(1, fault=f"kill-at={kind}:{n}")[0]
        order = healthy[:3]
        order.insert(node, faulty)
        out = f"C{seed}"
        job = make_job(self.root, "matmul_plain", DIMS, {"A": "A", "B": "B", "C": out}, name=f"job{seed}")
        result = self.pods.run(self.pods.session(order), job, CLUSTER)
        code = self.pods.wait_exit(faulty, 10)
        self.order = order
        return node, kind, n, faulty, code, result, out

    def logs_of(self, nodes: list[int]) -> str:
        """The last lines of these nodes' pod logs: why a healthy pod went away."""
        tails = []
        for node in nodes:
            pod = self.order[node]
            exit_code = self.pods.wait_exit(pod, 2)
            lines = pod.log.read_text(errors="replace").splitlines()[-15:]
            tails.append(f"--- node {node} (exit code {exit_code}), {pod.log.name}:\n" + "\n".join(lines))
        return "\n".join(tails)

    def close(self):
        self.pods.close()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    m = Matrix(tmp_path_factory.mktemp("kill-matrix"), tmp_path_factory.mktemp("kill-matrix-logs"))
    yield m
    m.close()


def test_every_kind_and_every_node_is_covered():
    counts = {n: {k: 3 for k in KINDS} for n in range(4)}
    faults = [choose_fault(s, counts) for s in range(RUNS)]
    assert {kind for _, kind, _ in faults} == set(KINDS)
    assert all(sum(1 for _, k, _ in faults if k == kind) == RUNS // len(KINDS) for kind in KINDS)
    assert {node for node, _, _ in faults} == {0, 1, 2, 3}


@pytest.mark.parametrize("seed", range(RUNS))
def test_kill_one_pod_at_one_instruction(matrix, seed):
    node, kind, n, faulty, code, result, out = matrix.run(seed)
    what = f"node {node} killed at {kind} #{n}"
    assert code == -signal.SIGKILL, f"{what}: the fault did not fire (exit code {code})"
    assert result.ok, f"{what}: {result.reason}"
    failed = [f["node"] for f in result.trace["failures"]]
    others = [f for f in failed if f != node]
    assert failed == [node], f"{what}: {result.trace['failures']}\n{matrix.logs_of(others)}"
    got = np.load(matrix.root / f"{out}.npy")
    assert got.tobytes() == matrix.expected.tobytes(), f"{what}: output differs from the failure-free run"
    assert staging_files(matrix.root) == [], what
    (matrix.root / f"{out}.npy").unlink()
