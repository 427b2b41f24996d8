"""A pod parses each leaf at most once per job, however many units and plan generations it runs.

The pod (its machine and shells) runs in this process with the CPU backend, fed by hand (no
network: one node, so no fetch, and no scheduler); its parses are counted inside the parser, by
file name (tests/parse_counts.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np

from pod.backends.backend_cpu import CpuBackend
from pod.rpc.server import PodConfig, PodServer
from scheduler.jobs import prepare as prep
from scheduler.jobs.job_storage import JobStorage
from scheduler.planning.planner import NodeFigure, plan
from schemas.capnp_io import job_program
from tests.job_files import write_add_job
from tests.parse_counts import count_parses


def test_a_pod_parses_each_leaf_once_per_job(tmp_path, monkeypatch):
    job, want = write_add_job(tmp_path, seed=5)
    prepared = prep.prepare(job, tmp_path / "add.job", [tmp_path], {"BLOCK": 256}, job_id="parse-count")
    assert len(prepared.program.units) == 16
    files = JobStorage.open(prepared)
    files.stage()

    parses = count_parses(monkeypatch)
    program = job_program(prepared.program, prepared.scalars)
    # a pod is its own process: it has only the leaf's text, not the IR the scheduler made it from
    from compiler.cluster.leaves import forget_leaf_kernels

    forget_leaf_kernels()

    async def run_generations() -> list[tuple[int, bool, str]]:
        pod = PodServer(PodConfig("127.0.0.1", 0, "token", (tmp_path,), data_port=False), CpuBackend())
        finished: list[tuple[int, bool, str]] = []
        done = asyncio.Event()
        queue_finished = pod.link.queue_finished

        def record(job_id, generation, ok, message):
            finished.append((generation, ok, message))
            done.set()
            queue_finished(job_id, generation, ok, message)

        pod.link.queue_finished = record
        try:
            for generation in (1, 2):  # a re-plan sends the program again with a newer plan
                figures = [NodeFigure(0, 0)]
                node_plan = plan(prepared.program, figures, prepared.uris, generation).node_plans[0]
                done.clear()
                await pod.submit(prepared.job_id, generation, program, node_plan, (), more=False)
                await asyncio.wait_for(done.wait(), 60)
        finally:
            pod.runtime.close()
        return finished

    finished = asyncio.run(run_generations())
    assert finished == [(1, True, ""), (2, True, "")]
    files.commit()
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)
    assert parses == Counter({"<cluster leaf main>": 1})  # 32 launches of one leaf, one parse
