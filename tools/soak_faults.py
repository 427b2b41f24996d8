"""Fault soak: the kill matrix of tests/faults over many more seeds (and a second fault mode).

    PYTHONPATH=. .venv/bin/python tools/soak_faults.py --minutes 5 [--first-seed 1000]

Each run: 4 CPU pods (3 kept across runs, 1 fresh with PHOBOS_FAULT) run a 16-unit matmul; the
faulty pod SIGKILLs itself at its n-th instruction of one kind (allocate, load, fetch, compute,
store, free, or serve: a tile a peer asked for or was offered), or on every third run SIGSTOPs
itself there and is woken after being declared dead (a zombie). Every run must succeed with an
output bitwise equal to the failure-free run's and leave no staging file. A failing seed is
printed; rerun it alone with --first-seed SEED --runs 1. Exit code 1 when any run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.harness import staging_files
from tests.faults.test_kill_matrix import CLUSTER, DIMS, Matrix  # noqa: E402
from tests.job_files import make_job

KINDS = ("allocate", "load", "fetch", "compute", "store", "free", "serve")


def one_run(matrix: Matrix, seed: int) -> tuple[str, str]:
    """(label, problem or "") for one seeded run."""
    rng = random.Random(seed)
    kind = KINDS[seed % len(KINDS)]
    zombie = seed % 3 == 2
    nodes = [n for n in sorted(matrix.counts) if matrix.counts[n].get(kind if kind != "serve" else "free", 0)]
    node = rng.choice(nodes)
    limit = matrix.counts[node].get(kind, 0) or 2  # serves are not in the plan: the first two
    n = rng.randint(1, limit)
    label = f"seed {seed}: {'stop' if zombie else 'kill'}-at={kind}:{n} on node {node}"
    pods = matrix.pods
    healthy = pods.healthy()
    while len(healthy) < 3:
        healthy += pods.start(1)
    faulty = pods.start(1, fault=f"{'stop' if zombie else 'kill'}-at={kind}:{n}")[0]
    order = healthy[:3]
    order.insert(node, faulty)
    matrix.order = order
    out = f"C{seed}"
    job = make_job(matrix.root, "matmul_plain", DIMS, {"A": "A", "B": "B", "C": out}, name=f"job{seed}")

    async def wake(session):  # a zombie is woken as soon as it is declared dead
        while zombie:
            state = session.current.state if session.current else None
            if state is not None and state.failures:
                faulty.signal(signal.SIGCONT)
                return
            await asyncio.sleep(0.02)

    try:
        result = pods.run(pods.session(order), job, CLUSTER, during=wake if zombie else None)
    finally:
        faulty.signal(signal.SIGCONT)
    code = pods.wait_exit(faulty, 10)
    if code is None:  # the fault never fired (n past what this node did): not a failure run
        faulty.signal(signal.SIGKILL)
        pods.wait_exit(faulty, 10)
    problems = []
    failed_nodes = [f["node"] for f in result.trace["failures"]]
    if failed_nodes != ([node] if code is not None else []):
        others = [n for n in failed_nodes if n != node]
        problems.append(f"nodes declared dead: {result.trace['failures']}\n{matrix.logs_of(others)}")
    if not result.ok:
        problems.append(f"job failed: {result.reason}")
    else:
        got = np.load(matrix.root / f"{out}.npy")
        if got.tobytes() != matrix.expected.tobytes():
            problems.append("output differs from the failure-free run")
        (matrix.root / f"{out}.npy").unlink()
    if staging_files(matrix.root):
        problems.append(f"staging files left: {staging_files(matrix.root)}")
    fired = "fired" if code is not None else "not-fired"
    return f"{label} ({fired}, {len(result.trace['failures'])} failure(s))", "; ".join(problems)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=None, help="stop after this many runs")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the pods' logs in this folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root, logs = Path(tmp) / "data", args.logs or Path(tmp) / "logs"
        root.mkdir()
        matrix = Matrix(root, logs)
        counts: Counter = Counter()
        failed: list[str] = []
        deadline = time.monotonic() + args.minutes * 60
        seed = args.first_seed
        try:
            while time.monotonic() < deadline and (args.runs is None or counts["runs"] < args.runs):
                label, problem = one_run(matrix, seed)
                counts["runs"] += 1
                counts["fired" if "(fired" in label else "not fired"] += 1
                counts[label.split()[2].split("=")[1].split(":")[0]] += 1
                if problem:
                    failed.append(f"{label}: {problem}")
                    print(f"FAILED {label}: {problem}", flush=True)
                seed += 1
        finally:
            matrix.close()
    print(f"soak_faults: {counts['runs']} runs, {counts['fired']} with the fault fired, "
          f"{len(failed)} failed; by kind: " + ", ".join(f"{k} {counts[k]}" for k in KINDS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
