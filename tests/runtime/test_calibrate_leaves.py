"""--tune-leaves: one pod times every @autotune point through probe jobs; every node uses the winner.

The real thing tunes on a GPU pod (test_calibrate_gpu.py); these tests run the same scheduler side
on CPU pods (require_gpu=False), where the interpreter's speed also depends on the tile."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from common.errors import UserError
from scheduler.tuning.tuner_leaves import choose, leaf_points, probe_seconds, tune_leaves
from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster


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
    from compiler.frontend.load import load_file

    kernel = load_file(JOB_KERNELS / "add.phk").kernel()
    assert leaf_points(kernel) == [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]
    assert leaf_points(kernel, {"BLOCK": 32}) == [{"BLOCK": 32}]  # pinned: its value only


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaves")
    rng = np.random.default_rng(6)
    arrays = {name: rng.standard_normal(4096).astype(np.float32) for name in "ab"}
    write_inputs(root, arrays)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler.pods.local_pods.visible_gpus", lambda: 0)  # CPU pods even on a GPU machine
        c, _, close = open_cluster(root, 2)
    c.arrays = arrays
    yield c
    close()


def _prepared(cluster, name):
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare

    job = make_job(cluster.root, "add", {"N": 4096}, {"a": "a", "b": "b", "c": name}, name=name)
    return prepare(read_job(job), job, [cluster.root])


def test_leaf_values_tuned_on_one_pod_are_used_by_every_node(cluster, tmp_path, monkeypatch):
    from scheduler.jobs.prepare import recompile

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

    tuned = recompile(prepared, values, best)
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


def test_a_pinned_leaf_value_is_kept_by_tune_leaves(cluster, tmp_path, monkeypatch):
    """`new-job --tile` (or the run's --tile) pins a leaf value: --tune-leaves times only that point
    and keeps it, and a cached result of an unpinned search is not reused for it."""
    from dataclasses import replace

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    prepared = _prepared(cluster, "c_pinned")
    said: list[str] = []
    run = cluster.loop.run_until_complete
    free = run(tune_leaves(cluster.session, prepared, cluster.options, [0, 1], {"BLOCK": 256}, said.append,
                           require_gpu=False))
    value = next(v for v in (16, 32, 64) if v != free["BLOCK"])  # a point the free search did not pick
    pinned = replace(prepared, pinned_tiles={"BLOCK": value})
    said.clear()
    best = run(tune_leaves(cluster.session, pinned, cluster.options, [0, 1], {"BLOCK": 256}, said.append,
                           require_gpu=False))
    assert best == {"BLOCK": value}
    assert any("1 points timed, 0 skipped" in line for line in said), said
