"""Settings shared by the benchmark files: where each result came from, in the saved JSON.

pytest-benchmark already records the CPU (py-cpuinfo) and the Python build in `machine_info`;
this adds the GPU the run could see (or None) and the core count, so results from the 2-core CI
machine and the GPU machine can be told apart in benchmarks/results/.
"""

from __future__ import annotations

import os

import pytest


def _gpu() -> dict | None:
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return None
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return {"name": name.decode() if isinstance(name, bytes) else str(name), "count": int(count)}
    except Exception:  # no cupy, no driver, no device: no GPU for this run
        return None


@pytest.hookimpl(optionalhook=True)  # a run with pytest-benchmark disabled still loads this file
def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["gpu"] = _gpu()
    machine_info["cpu_count"] = os.cpu_count()
