"""End to end: the add kernel over 1 to 4 CPU pods, several @cluster sizes; bitwise equal output."""

from __future__ import annotations

import numpy as np
import pytest

from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster, reference

N = 4096


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("add")
    rng = np.random.default_rng(1)
    arrays = {"a": rng.standard_normal(N).astype(np.float32), "b": rng.standard_normal(N).astype(np.float32)}
    write_inputs(root, arrays)
    c, _, close = open_cluster(root, 4)
    c.arrays = arrays
    yield c
    close()


@pytest.mark.parametrize("pods", [1, 2, 3, 4])
@pytest.mark.parametrize("block", [256, 1024])  # 16 or 4 super-tiles: more, then as many as pods
def test_add(cluster, pods, block):
    folder = cluster.root
    out = f"c_{pods}_{block}"
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": out}, name=out)
    result = cluster.run(job, nodes=list(range(pods)), cluster_values={"BLOCK": block})
    assert result.ok, result.reason
    got = np.load(folder / f"{out}.npy")
    want = reference(JOB_KERNELS / "add.phk", {"N": N}, {**cluster.arrays, "c": np.zeros(N, np.float32)})["c"]
    assert np.array_equal(got, want)  # one f32 add per element: bitwise
    summary = result.trace["summary"]["nodes"]
    assert [row["node"] for row in summary] == list(range(pods))
    units = N // block
    assert sum(row["bytes_stored"] for row in summary) == N * 4
    assert sum(row["bytes_loaded"] for row in summary) == 2 * N * 4  # each input region loaded once
    assert {u["node"] for u in result.trace["units"]} == set(range(min(pods, units)))
    assert not list(folder.glob(".*staging*"))
