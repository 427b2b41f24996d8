"""Matmul, flash attention and add through the whole cluster runtime, at several @cluster sizes.

Every case is one job run by the real scheduler code (scheduler.jobs.prepare +
scheduler.running.run.PodSession) on real pod processes over Cap'n Proto RPC, reading and
writing .npy files in storage: CPU pods (the reference interpreter) 1, 2 and 4 of them; GPU pods
(CUDA leaves) 1 and 2 on one GPU, skipped where there is none. Each case is first run once and
its output checked against a float64 numpy reference, then timed over several rounds, each
starting from the same cold storage (see cluster_harness). `extra_info` carries the ratios to
the anchor and to the bound measured in the same run (cluster_cases explains both), and what the
runtime did (bytes loaded, fetched, ...).

    PYTHONPATH=. .venv/bin/pytest benchmarks/test_cluster_runtime.py --benchmark-only
    PHOBOS_BENCH_QUICK=1 ...   # 1 timed round per case, not 5 (benchmarks/main.py --quick sets it)
    PHOBOS_BENCH_ROUNDS=N ...  # N timed rounds per case
    PHOBOS_BENCH_CASES=cpu|gpu|all (default all; the GPU cases skip where no GPU is present)
    PHOBOS_BENCH_LOG=FILE ...  # also append each case's figures to FILE as one JSON line
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from benchmarks.cluster_anchors import cpu_anchor, cpu_brand, gpu_anchor, gpu_missing, gpu_name
from benchmarks.cluster_cases import (
    Case,
    Yardsticks,
    bytes_touched,
    cpu_cases,
    flops,
    gpu_cases,
    input_bytes,
    make_inputs,
    output_name,
    ratios,
    reference,
    tolerance,
)
from benchmarks.cluster_harness import ClusterPool, data_root, read_bandwidth, trace_figures, write_problem

QUICK = os.environ.get("PHOBOS_BENCH_QUICK") == "1"
ROUNDS = int(os.environ.get("PHOBOS_BENCH_ROUNDS") or (1 if QUICK else 5))
WHICH = os.environ.get("PHOBOS_BENCH_CASES", "all")


def _params():
    params = []
    if WHICH in ("all", "cpu"):
        params += [pytest.param(c, id=c.id) for c in cpu_cases()]
    if WHICH in ("all", "gpu"):
        params += [pytest.param(c, id=c.id, marks=pytest.mark.gpu) for c in gpu_cases()]
    return params


@pytest.fixture(scope="session")
def pool():
    pool = ClusterPool.open(data_root())
    yield pool
    pool.close()


class ProblemData:
    """Each problem's files and expected output, made once and shared by its cases."""

    def __init__(self, pool: ClusterPool):
        self.pool = pool
        self.files = {}
        self.expected = {}

    def get(self, case: Case):
        problem = case.problem
        if problem not in self.files:
            self.files[problem] = write_problem(self.pool.root, problem, make_inputs(problem))
        return self.files[problem]

    def reference(self, case: Case) -> np.ndarray:
        if case.problem not in self.expected:
            self.expected[case.problem] = reference(case.problem, self.get(case).arrays)
        return self.expected[case.problem]


def measure_yardsticks(case: Case, files) -> tuple[Yardsticks, str, str, float]:
    """Anchor and storage bandwidth, measured right before the case's own rounds: on a shared
    machine whose load changes, a ratio is only meaningful between figures taken together."""
    problem = case.problem
    if case.device == "gpu":
        anchor_s, anchor = gpu_anchor(problem, files.arrays)
        machine = gpu_name()
    else:
        anchor_s, anchor = cpu_anchor(problem, files.arrays, repeat=3), "numpy"
        machine = cpu_brand()
    storage_bw = read_bandwidth(files.input_paths())
    warm_bw = read_bandwidth(files.input_paths(), cold=False)
    return Yardsticks(anchor_s, storage_bw, input_bytes(problem)), anchor, machine, warm_bw


@pytest.fixture(scope="session")
def problem_data(pool):
    return ProblemData(pool)


@pytest.mark.parametrize("case", _params())
def test_cluster_job(benchmark, pool, problem_data, case: Case):
    if case.device == "gpu" and gpu_missing():
        pytest.skip(gpu_missing())
    files = problem_data.get(case)
    problem = case.problem
    output = output_name(problem)

    # One untimed run (it also warms the pods: leaf parsing or PTX loading), checked.
    files.reset(output)
    first = pool.run_job(case, files)
    assert first.ok, first.reason
    want = problem_data.reference(case)
    rtol, atol = tolerance(problem, want)
    np.testing.assert_allclose(np.load(files.path(output)), want, rtol=rtol, atol=atol)

    load_before = os.getloadavg()[0]
    sticks, anchor, machine, warm_bw = measure_yardsticks(case, files)
    results = []
    benchmark.pedantic(lambda: results.append(pool.run_job(case, files)),
                       setup=lambda: files.reset(output), rounds=ROUNDS, iterations=1)
    assert all(r.ok for r in results), [r.reason for r in results if not r.ok]

    job_s = benchmark.stats.stats.median
    info = benchmark.extra_info
    info.update(
        case=case.id, kind=case.kind, device=case.device, pods=case.pods, problem=problem.label,
        dims=problem.dim, cluster_values=dict(case.cluster_values), tile=case.tile_label,
        kernel=case.kernel_file, machine=machine, anchor=anchor, quick=QUICK,
        flops=flops(problem), input_bytes=sticks.input_bytes,
        storage_read_warm_gbps=warm_bw / 1e9, cpu_count=os.cpu_count(),
        load_average=[load_before, os.getloadavg()[0]],  # 1-minute load before and after: contention
    )
    info.update(ratios(job_s, sticks))
    info["job_gflops"] = flops(problem) / job_s / 1e9
    info["anchor_gflops"] = flops(problem) / sticks.anchor_s / 1e9
    if bytes_touched(problem):
        info["anchor_gbps"] = bytes_touched(problem) / sticks.anchor_s / 1e9
    info.update(trace_figures(results[-1].trace))
    log_case(benchmark)


def log_case(benchmark) -> None:
    """Append the case's figures to $PHOBOS_BENCH_LOG (JSON lines) at once: pytest-benchmark saves
    only when the session ends, so a run cut short by a timeout still leaves these."""
    path = os.environ.get("PHOBOS_BENCH_LOG")
    if not path:
        return
    stats = benchmark.stats.stats
    row = {**benchmark.extra_info, "min_s": stats.min, "median_s": stats.median, "rounds": stats.rounds}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
