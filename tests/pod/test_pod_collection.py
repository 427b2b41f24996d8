"""The pod's cycle collector (pod/rpc/server.py `_collect_garbage`): on a CPU pod the young
generations at every turn and every object only every FULL_COLLECTION_EVERY-th, so that a job's
long-lived plan and state are not gone through twice a second; on a GPU pod everything, every
time (its device buffers caught in a cycle are freed at once)."""

from __future__ import annotations

import asyncio
import gc

from pod.backends.backend_cpu import CpuBackend
from pod.rpc import server
from tests.pod.harness import in_process_pod


class GpuKind(CpuBackend):
    kind = "gpu"


def _collections(backend, turns: int, monkeypatch, tmp_path) -> list[int]:
    """The generation each of the collector's first `turns` collections was asked for."""
    monkeypatch.setattr(server, "COLLECT_EVERY_S", 0)
    generations = []

    async def main():
        pod, _, _ = in_process_pod(tmp_path, backend)

        def collect(generation=2):
            generations.append(generation)
            if len(generations) == turns:
                pod.stop.set()
            return 0

        monkeypatch.setattr(server.gc, "collect", collect)
        try:
            await asyncio.wait_for(pod._collect_garbage(), 30)
        finally:
            pod.runtime.close()

    try:
        asyncio.run(main())
    finally:  # the collector froze and disabled this process's collection: pytest's own again
        gc.unfreeze()
        gc.enable()
    return generations


def test_a_cpu_pod_collects_the_young_generations_and_everything_only_now_and_then(monkeypatch, tmp_path):
    monkeypatch.setattr(server, "FULL_COLLECTION_EVERY", 3)
    assert _collections(CpuBackend(), 7, monkeypatch, tmp_path) == [1, 1, 2, 1, 1, 2, 1]


def test_a_gpu_pod_collects_everything_every_time(monkeypatch, tmp_path):
    assert _collections(GpuKind(), 3, monkeypatch, tmp_path) == [2, 2, 2]
