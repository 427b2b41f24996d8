"""--tune-leaves: one pod times every @autotune point through probe jobs; every node uses the winner.

The real thing tunes on a GPU pod (marked gpu below); the CPU tests run the same scheduler side
on a CPU pod (require_gpu=False), where the interpreter's speed also depends on the tile."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from common.errors import UserError
from scheduler.tuner_leaves import choose, leaf_points, probe_seconds, tune_leaves
from tests.runtime.cluster import JOB_KERNELS, make_job, open_cluster, reference, write_inputs


def test_probe_seconds_times_the_steady_unit_and_choose_takes_the_fastest():
    events = [{"kind": "compute", "ok": True, "unit": 0, "start": 0.0, "end": 1.0},  # prepares the leaf
              {"kind": "compute", "ok": True, "unit": 1, "start": 1.0, "end": 1.25},
              {"kind": "compute", "ok": True, "unit": 1, "start": 1.25, "end": 1.5},
              {"kind": "load", "ok": True, "unit": 1, "start": 0.0, "end": 9.0}]
    assert probe_seconds({"events": events}) == pytest.approx(0.5)
    assert probe_seconds({"events": events[:1]}) == pytest.approx(1.0)
    timings = {(("B", 16),): [3.0, 1.0, 2.0], (("B", 32),): [1.5, 1.5, 9.0], (("B", 64),): [2.0]}
    assert choose(timings) == {"B": 32}  # medians 2.0, 1.5, 2.0


def test_leaf_points_cover_the_autotune_space():
    from compiler.frontend import load_file

    kernel = load_file(JOB_KERNELS / "add.phk").kernel()
    assert leaf_points(kernel) == [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaves")
    rng = np.random.default_rng(6)
    arrays = {name: rng.standard_normal(4096).astype(np.float32) for name in "ab"}
    write_inputs(root, arrays)
    c, _, close = open_cluster(root, 2)
    c.arrays = arrays
    yield c
    close()


def _prepared(cluster, name):
    from scheduler.jobfile import read_job
    from scheduler.prepare import prepare

    job = make_job(cluster.root, "add", {"N": 4096}, {"a": "a", "b": "b", "c": name}, name=name)
    return prepare(read_job(job), job, [cluster.root])


def test_leaf_values_tuned_on_one_pod_are_used_by_every_node(cluster, tmp_path, monkeypatch):
    from scheduler.tuner_cli import with_values

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    prepared = _prepared(cluster, "c_leaves")
    said: list[str] = []
    run = cluster.loop.run_until_complete
    values = {"BLOCK": 256}
    best = run(asyncio.wait_for(tune_leaves(cluster.session, prepared, cluster.options, [0, 1], values,
                                            said.append, require_gpu=False), 120))
    assert best in [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]
    assert any("3 points timed, 0 skipped" in line for line in said)
    assert not [p for p in cluster.root.iterdir() if "probe" in p.name]  # scratch outputs removed

    tuned = with_values(prepared, values, best)
    assert all(dict(leaf.tile_values) == best for leaf in tuned.program.leaves)
    result = run(asyncio.wait_for(cluster.session.run(tuned, cluster.options, [0, 1]), 120))
    assert result.ok, result.reason
    assert {e["node"] for e in result.trace["events"] if e["kind"] == "compute"} == {0, 1}
    np.testing.assert_array_equal(np.load(cluster.root / "c_leaves.npy"),
                                  cluster.arrays["a"] + cluster.arrays["b"])

    said.clear()
    again = run(tune_leaves(cluster.session, prepared, cluster.options, [0, 1], values, said.append,
                            require_gpu=False))
    assert again == best and any("reusing" in line for line in said)


def test_tune_leaves_needs_a_gpu_pod(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    prepared = _prepared(cluster, "c_nogpu")
    with pytest.raises(UserError, match="--tune-leaves needs a GPU pod to tune on; the pods are cpu pods"):
        cluster.loop.run_until_complete(tune_leaves(cluster.session, prepared, cluster.options, [0, 1],
                                                    {"BLOCK": 256}, lambda _: None))


@pytest.mark.gpu
def test_tune_leaves_on_a_gpu_pod(tmp_path, monkeypatch):
    from scheduler.jobfile import read_job
    from scheduler.prepare import prepare
    from scheduler.tuner_cli import TuneOptions, tune_on_session

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
        chosen = dict(tuned.prepared.program.tile_values)
        assert all(dict(leaf.tile_values) == {k: chosen[k] for k in dict(leaf.tile_values)}
                   for leaf in tuned.prepared.program.leaves)
        want = reference(JOB_KERNELS / "matmul.phk", dims, arrays, scalars)["C"]
        # f32 sums of 512 products in another order: far below 1e-4 of the output's scale
        np.testing.assert_allclose(np.load(tmp_path / "C.npy"), want, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(want).max()))
    finally:
        close()
