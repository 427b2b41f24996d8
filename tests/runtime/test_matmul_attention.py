"""End to end: matmul (with a cluster loop over K, and without) and flash attention over 1 to 4
CPU pods and several @cluster sizes, compared with the plain kernel under the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster, reference


def close_to(got: np.ndarray, want: np.ndarray) -> None:
    # The cluster path sums K (or the keys) in super-tile chunks and per CTA tile, in another
    # order than the plain kernel: f32 sums of a few hundred terms of size ~1 differ by about
    # n * 2^-24 * magnitude, far below 1e-4 of the output's scale; a wrong tile is off by ~1.
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("mm")
    rng = np.random.default_rng(2)
    arrays = {
        "A": rng.standard_normal((256, 256)).astype(np.float32),
        "B": rng.standard_normal((256, 256)).astype(np.float32),
        "C0": rng.standard_normal((256, 256)).astype(np.float32),
        "Q": rng.standard_normal((256, 64)).astype(np.float32),
        "K": rng.standard_normal((96, 64)).astype(np.float32),
        "V": rng.standard_normal((96, 64)).astype(np.float32),
    }
    write_inputs(root, arrays)
    c, _, close = open_cluster(root, 4)
    c.arrays = arrays
    yield c
    close()


@pytest.mark.parametrize("pods", [1, 2, 3, 4])
@pytest.mark.parametrize("tiles", [(128, 128, 128), (128, 256, 128), (256, 256, 256)])
def test_matmul_with_cluster_loop(cluster, pods, tiles):
    tm, tn, tk = tiles
    name = f"mm_{pods}_{tm}_{tn}_{tk}"
    out = cluster.root / f"{name}.npy"
    np.save(out, cluster.arrays["C0"])  # C is read (beta * C_old) and written
    dims = {"M": 256, "N": 256, "K": 256}
    scalars = {"alpha": 1.5, "beta": -0.5}
    job = make_job(cluster.root, "matmul", dims, {"A": "A", "B": "B", "C": name}, scalars, name=name)
    result = cluster.run(job, list(range(pods)), {"TILE_M": tm, "TILE_N": tn, "TILE_K": tk})
    assert result.ok, result.reason
    arrays = {"A": cluster.arrays["A"], "B": cluster.arrays["B"], "C": cluster.arrays["C0"]}
    want = reference(JOB_KERNELS / "matmul.phk", dims, arrays, scalars)["C"]
    close_to(np.load(out), want)
    # every A and B super-tile is loaded from storage exactly once, whatever the node count
    loaded = sum(r["bytes_loaded"] for r in result.trace["summary"]["nodes"])
    assert loaded == (256 * 256 * 3) * 4  # A, B, and C_old, once each
    units = (256 // tm) * (256 // tn)
    if pods > 1 and units > 1:
        assert sum(r["bytes_fetched"] for r in result.trace["summary"]["nodes"]) > 0


@pytest.mark.parametrize("pods", [1, 2, 3, 4])
@pytest.mark.parametrize("tiles", [(64, 64), (128, 64)])
def test_matmul_without_cluster_loop(cluster, pods, tiles):
    tm, tn = tiles
    name = f"mp_{pods}_{tm}_{tn}"
    dims = {"M": 256, "N": 256, "K": 256}
    job = make_job(cluster.root, "matmul_panels", dims, {"A": "A", "B": "B", "C": name}, name=name)
    result = cluster.run(job, list(range(pods)), {"TILE_M": tm, "TILE_N": tn})
    assert result.ok, result.reason
    arrays = {"A": cluster.arrays["A"], "B": cluster.arrays["B"], "C": np.zeros((256, 256), np.float32)}
    want = reference(JOB_KERNELS / "matmul_panels.phk", dims, arrays)["C"]
    close_to(np.load(cluster.root / f"{name}.npy"), want)


@pytest.mark.parametrize("pods", [1, 2, 3, 4])
@pytest.mark.parametrize("br", [64, 128])  # 4 or 2 row super-tiles
def test_flash_attention(cluster, pods, br):
    name = f"fa_{pods}_{br}"
    dims = {"Nq": 256, "Nk": 96}
    scalars = {"scale": 0.125}
    job = make_job(cluster.root, "flash_attention", dims, {"Q": "Q", "K": "K", "V": "V", "O": name},
                   scalars, name=name)
    result = cluster.run(job, list(range(pods)), {"BR": br})
    assert result.ok, result.reason
    arrays = {t: cluster.arrays[t] for t in "QKV"} | {"O": np.zeros((256, 64), np.float32)}
    want = reference(JOB_KERNELS / "flash_attention.phk", dims, arrays, scalars)["O"]
    close_to(np.load(cluster.root / f"{name}.npy"), want)
    nodes = result.trace["summary"]["nodes"]
    # K and V are loaded once in the whole cluster; every other node that runs a unit fetches them
    assert sum(r["bytes_loaded"] for r in nodes) == (256 * 64 + 2 * 96 * 64) * 4
