"""End to end: a CPU pod stores long runs of its buffers straight to the disk (O_DIRECT), past
the page cache, into a staging copy whose data starts on a disk block; the output is exact."""

from __future__ import annotations

import os

import numpy as np
import pytest

from common import fileio, storage
from scheduler.jobs.jobfile import build_job, write_job
from tests.job_files import in_page_cache, write_inputs
from tests.runtime.cluster import open_cluster

N = 1 << 19  # 2 MiB of f32, two units of 1 MiB (DIRECT_MIN_BYTES): each store one direct write
KERNEL = """
@cluster(BLOCK in [262144])
@autotune(BLOCK in [65536])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def test_a_cpu_pods_stores_go_past_the_page_cache(tmp_path):
    probe = tmp_path / "probe"
    probe.write_bytes(bytes(4096))
    direct = fileio._open_direct(probe)
    if direct < 0:
        pytest.skip(f"{tmp_path}'s file system has no direct I/O")
    os.close(direct)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    write_inputs(tmp_path, {"a": a, "b": b})
    (tmp_path / "add.phk").write_text(KERNEL)
    job = build_job(tmp_path / "add.phk", None, {"N": N}, {},
                    {t: f"file:{t}.npy" for t in "abc"})
    write_job(job, tmp_path / "job.capnp")
    cluster, _, close = open_cluster(tmp_path, 1)
    try:
        result = cluster.run(tmp_path / "job.capnp")
    finally:
        close()
    assert result.ok, result.reason
    out = tmp_path / "c.npy"
    offset = storage.layout(out).offset
    assert offset == 4096
    # every page of the data went to the disk directly: none is in the page cache (a buffered
    # store leaves them all there)
    assert not any(in_page_cache(out, offset + page) for page in range(0, 4 * N, 64 << 10))
    np.testing.assert_array_equal(np.load(out), a + b)  # bitwise: one f32 add per element
