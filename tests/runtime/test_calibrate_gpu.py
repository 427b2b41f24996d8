"""--tune-leaves on a GPU pod: the tuned values run the job right (gpu marker: skipped without a GPU).

A module of its own: a module's pods live on one event loop, and a thread has one KJ loop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster, reference

pytestmark = pytest.mark.gpu


def test_tune_leaves_on_a_gpu_pod(tmp_path, monkeypatch):
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare
    from scheduler.tuning.tuner_cli import TuneOptions, tune_on_session

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(7)
    arrays = {"A": rng.standard_normal((512, 512)).astype(np.float32),
              "B": rng.standard_normal((512, 512)).astype(np.float32),
              "C": rng.standard_normal((512, 512)).astype(np.float32)}
    write_inputs(tmp_path, arrays)
    dims, scalars = {"M": 512, "N": 512, "K": 512}, {"alpha": 1.0, "beta": 0.5}
    job = make_job(tmp_path, "matmul", dims, {"A": "A", "B": "B", "C": "C"}, scalars, name="mm")
    cluster, local, close = open_cluster(tmp_path, 2)
    try:
        assert {cluster.session.infos[n].backend for n in cluster.session.pods} == {"gpu"}
        prepared = prepare(read_job(job), job, [tmp_path], {"TILE_M": 256, "TILE_N": 256, "TILE_K": 256})
        said: list[str] = []
        tuned = cluster.loop.run_until_complete(asyncio.wait_for(
            tune_on_session(cluster.session, prepared, cluster.options, TuneOptions(tune_leaves=True),
                            said.append), 300))
        assert tuned.result.ok, tuned.result.reason
        print("\n".join(said))
        assert any("points timed" in line for line in said)
        chosen = dict(tuned.prepared.program.tile_values)
        assert all(dict(leaf.tile_values) == {k: chosen[k] for k in dict(leaf.tile_values)}
                   for leaf in tuned.prepared.program.leaves)
        want = reference(JOB_KERNELS / "matmul.phk", dims, arrays, scalars)["C"]
        # f32 sums of 512 products in another order: far below 1e-4 of the output's scale
        np.testing.assert_allclose(np.load(tmp_path / "C.npy"), want, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(want).max()))
    finally:
        close()
