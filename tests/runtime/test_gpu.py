"""End to end on a GPU: the same jobs with one pod on the GPU, and with two pods sharing it
(tiles then move between pods of one host, through CUDA IPC where the GPU allows)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster, reference
from tests.runtime.test_matmul_attention import close_to

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=[1, 2], ids=["one-pod", "two-pods-one-gpu"])
def cluster(request, tmp_path_factory):
    from scheduler.pods.local_pods import visible_gpus

    root = tmp_path_factory.mktemp(f"gpu{request.param}")
    rng = np.random.default_rng(4)
    arrays = {
        "a": rng.standard_normal(4096).astype(np.float32),
        "b": rng.standard_normal(4096).astype(np.float32),
        "A": rng.standard_normal((256, 256)).astype(np.float32),
        "B": rng.standard_normal((256, 256)).astype(np.float32),
        "C0": rng.standard_normal((256, 256)).astype(np.float32),
        "Q": rng.standard_normal((256, 64)).astype(np.float32),
        "K": rng.standard_normal((96, 64)).astype(np.float32),
        "V": rng.standard_normal((96, 64)).astype(np.float32),
    }
    write_inputs(root, arrays)
    assert visible_gpus() >= 1
    c, local, close = open_cluster(root, request.param)
    assert [p.device for p in local.pods] == ["0"] * request.param
    c.arrays = arrays
    yield c
    close()


def test_the_gpu_count_without_cuda_is_cudas():
    """scheduler.pods.local_pods counts GPUs from the driver's /proc entries (no CUDA start-up)."""
    import cupy

    from scheduler.pods.local_pods import visible_gpus

    assert visible_gpus() == cupy.cuda.runtime.getDeviceCount()


def test_add_on_gpu(cluster):
    job = make_job(cluster.root, "add", {"N": 4096}, {"a": "a", "b": "b", "c": "c_add"}, name="add")
    result = cluster.run(job, cluster_values={"BLOCK": 256})
    assert result.ok, result.reason
    assert {n["backend"] for n in result.trace["nodes"]} == {"gpu"}
    want = cluster.arrays["a"] + cluster.arrays["b"]
    np.testing.assert_array_equal(np.load(cluster.root / "c_add.npy"), want)


def test_matmul_on_gpu(cluster):
    out = cluster.root / "c_mm.npy"
    np.save(out, cluster.arrays["C0"])
    dims, scalars = {"M": 256, "N": 256, "K": 256}, {"alpha": 1.5, "beta": -0.5}
    job = make_job(cluster.root, "matmul", dims, {"A": "A", "B": "B", "C": "c_mm"}, scalars, name="mm")
    result = cluster.run(job, cluster_values={"TILE_M": 128, "TILE_N": 128, "TILE_K": 128})
    assert result.ok, result.reason
    arrays = {"A": cluster.arrays["A"], "B": cluster.arrays["B"], "C": cluster.arrays["C0"]}
    want = reference(JOB_KERNELS / "matmul.phk", dims, arrays, scalars)["C"]
    close_to(np.load(out), want)


def test_flash_attention_on_gpu(cluster):
    dims, scalars = {"Nq": 256, "Nk": 96}, {"scale": 0.125}
    job = make_job(cluster.root, "flash_attention", dims, {"Q": "Q", "K": "K", "V": "V", "O": "o_fa"},
                   scalars, name="fa")
    result = cluster.run(job, cluster_values={"BR": 64})
    assert result.ok, result.reason
    arrays = {t: cluster.arrays[t] for t in "QKV"} | {"O": np.zeros((256, 64), np.float32)}
    want = reference(JOB_KERNELS / "flash_attention.phk", dims, arrays, scalars)["O"]
    close_to(np.load(cluster.root / "o_fa.npy"), want)
