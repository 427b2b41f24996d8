"""--calibrate: the fits on synthetic traces (pure), and probes through real CPU pods with the cache."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from scheduler.tuning import calibrate as cal
from scheduler.tuning import calibration_fit as fit
from scheduler.tuning.tuner import Figures, LeafRate
from schemas.instructions import Compute, Fetch, Load
from schemas.program import ClusterProgram, Leaf, Region
from tests.job_files import JOB_KERNELS, make_job, write_inputs
from tests.runtime.cluster import open_cluster, reference

BASE = Figures(nodes=2, vram_bytes=0, leaf_flops=1e9, link_bw=1e9, storage_bw=1e9, transfer_s=1e-3)


def leaf(name: str, flops: int) -> Leaf:
    return Leaf(name=name, kernel="k", source="", dims=(), tile_values=(), grid=(1,), threads=256,
                tensors=(), scalars=(), flops=flops)


def program(**flops: int) -> ClusterProgram:
    return ClusterProgram("k", "", (), (), (), (1,), (), (), tuple(leaf(n, f) for n, f in flops.items()), ())


def event(node, id_, kind, start, end, nbytes=0, leaf_name=None, peer=None):
    return {"node": node, "id": id_, "kind": kind, "start": start, "end": end, "bytes": nbytes,
            "leaf": leaf_name, "peer": peer, "ok": True}


def probe(events, prog, wall, instructions=None):
    return fit.Probe({"events": events, "summary": {"wall_s": wall}}, prog, instructions or {})


# ---- pure fits ---------------------------------------------------------------------------------


def test_fit_line_recovers_a_line_and_keeps_costs_non_negative():
    assert fit.fit_line([1, 2, 3], [3, 5, 7]) == pytest.approx((1, 2))
    assert fit.fit_line([2, 2], [4, 6]) == pytest.approx((0, 2.5))  # one size: all on the slope
    # falling with size (scatter; no leaf or transfer does): through the origin, not an infinite rate
    assert fit.fit_line([1, 2], [5, 3]) == pytest.approx((0, (5 + 6) / 5))
    a, b = fit.fit_line([1, 2, 3], [0.5, 3, 5.5])  # intercept -2 would be negative: through 0
    assert a == 0 and b == pytest.approx((0.5 + 6 + 16.5) / 14)


def test_grouped_medians_ignore_a_few_slow_samples():
    xs, ys = fit.grouped_medians([1, 1, 1, 2, 2, 2], [1, 1, 50, 2, 2, 90])
    assert (xs, ys) == ([1, 2], [1, 2])


def test_leaf_rates_from_two_sizes_skip_each_nodes_first_launch():
    # step: 0.01 s + flops / 1e9 (1e6 FLOPs -> 0.011 s, 1e7 -> 0.02 s); first launches are slow
    # (the pod prepares the leaf) and must not tilt the line; computes never overlap here.
    small = program(step=1_000_000)
    big = program(step=10_000_000)
    events_small = [event(0, 0, "compute", 0.0, 0.5, leaf_name="step")]
    events_small += [event(0, i, "compute", i, i + 0.011, leaf_name="step") for i in range(1, 4)]
    events_big = [event(1, 0, "compute", 0.0, 0.7, leaf_name="step")]
    events_big += [event(1, i, "compute", i, i + 0.02, leaf_name="step") for i in range(1, 4)]
    probes = [probe(events_small, small, 4.0), probe(events_big, big, 4.0)]
    rates = fit.fit_leaf_rates(probes)
    assert rates["step"].launch_s == pytest.approx(0.01)
    assert rates["step"].flops_per_s == pytest.approx(1e9)
    # preparation: first launches beyond a steady one, median over the two nodes, summed per leaf
    assert fit.leaf_preparation_s(probes, rates) == pytest.approx(((0.5 - 0.011) + (0.7 - 0.02)) / 2)


def test_overlapping_computes_share_the_node():
    # Two computes of 1 s each side by side: the node did 2 s of launches in 1 s.
    prog = program(main=1000)
    events = [event(0, 1, "compute", 0, 0.1, leaf_name="main"),  # first launch (preparation)
              event(0, 2, "compute", 1, 2, leaf_name="main"), event(0, 3, "compute", 1, 2, leaf_name="main")]
    p = probe(events, prog, 3.0)
    assert fit.concurrency([p], ("compute",)) == pytest.approx((0.1 + 2) / 1.1)
    together = (0.1 + 2) / 1.1
    rate = fit.fit_leaf_rates([p])["main"]
    assert rate.launch_time(1000) == pytest.approx(1 / together)


def test_fetch_time_counts_from_when_the_peer_had_the_tile():
    region = Region("A", (0, 0), (256, 256))
    instructions = {0: {10: Load(10, (), 5, 0, region)},
                    1: {20: Fetch(20, (), 7, 0, 5)}}
    events = [event(0, 10, "load", 0.0, 1.0, 262144),
              event(1, 20, "fetch", 0.1, 1.25, 262144, peer=0),  # waited 0.9 s for the load
              event(0, 11, "store", 1.0, 1.5, 262144)]
    p = probe(events, program(), 2.0, instructions)
    assert fit._fetch_samples(p) == ([262144.0], [pytest.approx(0.25)])
    fitted = fit.fit_transfers([p], BASE)
    assert fitted.job_s == pytest.approx(2.0 - 1.5)  # wall minus the span of the events
    assert fitted.link_bw == pytest.approx(262144 / 0.25 * fit.concurrency([p], ("load", "store", "fetch")))


def test_a_partials_fetch_counts_from_its_writers_last_launch():
    # A split's partial is no load's: node 0 writes buffer 5 in two launches (a step, then a merge
    # into it), and node 1's fetch of it waits for the second; a launch after the fetch's end
    # (a later unit's, the buffer number used again) does not count.
    instructions = {0: {10: Compute(10, (), "step", (("C", 5),), 0),
                        11: Compute(11, (), "merge", (("C", 5),), 0),
                        12: Compute(12, (), "step", (("C", 5),), 1)},
                    1: {20: Fetch(20, (), 7, 0, 5)}}
    events = [event(0, 10, "compute", 0.0, 1.0, leaf_name="step"),
              event(0, 11, "compute", 1.0, 1.5, leaf_name="merge"),
              event(1, 20, "fetch", 0.2, 1.75, 262144, peer=0),
              event(0, 12, "compute", 2.0, 3.0, leaf_name="step")]
    p = probe(events, program(step=1, merge=1), 3.5, instructions)
    assert fit._fetch_samples(p) == ([262144.0], [pytest.approx(0.25)])


def test_figures_from_a_calibration_and_the_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    calibration = fit.Calibration(fit.TransferFit(0.002, 5e8, 0.004, 2e8, 0.05),
                                  {"init": LeafRate(0.001, 1e10), "step": LeafRate(0.003, 2e9)}, 0.02)
    figures = fit.figures_from(calibration, BASE)
    got = (figures.storage_bw, figures.link_bw, figures.transfer_s, figures.link_s)
    assert got == (5e8, 2e8, 0.002, 0.004)
    assert figures.job_s == pytest.approx(0.07)
    assert figures.rate("step") == LeafRate(0.003, 2e9) and figures.leaf_flops == 2e9  # the slowest leaf
    assert cal.cached_calibration("c", "k") is None
    cal.store_calibration("c", "k", calibration)
    assert cal.cached_calibration("c", "k") == calibration
    assert cal.cached_calibration("other cluster", "k") is None
    assert json.loads((tmp_path / cal.CACHE_FILE).read_text())["version"] == cal.CACHE_VERSION
    (tmp_path / cal.CACHE_FILE).write_text("{not json")
    assert cal.cached_calibration("c", "k") is None  # a broken cache is ignored, not fatal


def test_instruction_cost_is_what_the_events_leave_unexplained_of_a_nodes_span():
    # One node: an allocate, a load (1 s), a compute (1 s) and a free. The model explains 2 s (no
    # overlap: the compute waits for the load); the node's events span 2.8 s: 0.8 s over 4
    # instructions is 0.2 s each.
    from schemas.instructions import Allocate, Compute, Free

    region = Region("A", (0, 0), (16, 16))
    table = {1: Allocate(1, (), 5, (16, 16)), 2: Load(2, (1,), 5, 0, region),
             3: Compute(3, (2,), "main", (("A", 5),), 0), 4: Free(4, (3,), 5)}
    events = [event(0, 1, "allocate", 0.0, 0.0), event(0, 2, "load", 0.1, 1.1, 1024),
              event(0, 3, "compute", 1.6, 2.6, leaf_name="main"), event(0, 4, "free", 2.8, 2.8)]
    p = probe(events, program(main=1000), 3.0, {0: table})
    figures = Figures(nodes=1, vram_bytes=0, leaf_flops=1000.0, link_bw=1e9, storage_bw=1024.0, overlap=0.0)
    assert fit.node_spans(p) == {0: pytest.approx(2.8)}
    assert fit.instruction_cost([p], figures, 0.0) == pytest.approx(0.2)
    assert fit.instruction_cost([p], figures, 0.4) == pytest.approx(0.1)  # less the preparation
    slow = Figures(**{**figures.__dict__, "leaf_flops": 100.0})  # explains more than the span: 0, not < 0
    assert fit.instruction_cost([p], slow, 0.0) == 0.0


def test_calibrated_figures_use_one_line_per_leaf_not_per_shape_times():
    # Two shapes of the same FLOPs timed 5x apart in two probes: scatter of the moment, not the
    # shape. The figures predict them alike, from the line through both.
    from scheduler.tuning.tuner import leaf_signature

    small = program(step=1_000_000)
    other = Leaf(name="step", kernel="k", source="", dims=(("M", 512),), tile_values=(("M", 64),),
                 grid=(1,), threads=256, tensors=(), scalars=(), flops=1_000_000)
    big = ClusterProgram("k", "", (), (), (), (1,), (), (), (other,), ())
    p1 = probe([event(0, i, "compute", i, i + 0.01, leaf_name="step") for i in range(4)], small, 5.0)
    p2 = probe([event(0, i, "compute", i, i + 0.05, leaf_name="step") for i in range(4)], big, 5.0)
    figures = fit.figures_from(fit.measure([p1, p2], BASE), BASE)
    assert figures.launch_times == ()
    t1 = figures.launch_time("step", leaf_signature(small.leaves[0]), 1_000_000)
    t2 = figures.launch_time("step", leaf_signature(other), 1_000_000)
    assert t1 == t2 == pytest.approx(0.03)  # one size: the median of the two medians, all on the slope


def test_cluster_key_leaves_out_ports():
    key = cal.cluster_key([("127.0.0.1", "cpu", "cpu (2 cores)"), ("127.0.0.1", "cpu", "cpu (2 cores)")])
    assert "127.0.0.1|cpu|cpu (2 cores)" in key and ":" not in key.replace("127.0.0.1", "")


# ---- through real pods ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("calibrate")
    rng = np.random.default_rng(5)
    arrays = {"A": rng.standard_normal((256, 256)).astype(np.float32),
              "B": rng.standard_normal((256, 256)).astype(np.float32),
              "C0": rng.standard_normal((256, 256)).astype(np.float32)}
    write_inputs(root, arrays)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("scheduler.pods.local_pods.visible_gpus", lambda: 0)  # CPU pods even on a GPU machine
        c, _, close = open_cluster(root, 2)
    c.arrays = arrays
    yield c
    close()


def test_autotuned_calibrated_run_is_right_and_reuses_its_cache(cluster, tmp_path, monkeypatch):
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare
    from scheduler.tuning.tuner_cli import TuneOptions, tune_on_session

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))
    np.save(cluster.root / "C.npy", cluster.arrays["C0"])
    dims, scalars = {"M": 256, "N": 256, "K": 256}, {"alpha": 1.0, "beta": 0.5}
    job_path = make_job(cluster.root, "matmul", dims, {"A": "A", "B": "B", "C": "C"}, scalars, name="cal")
    said: list[str] = []

    def tuned_run():
        prepared = prepare(read_job(job_path), job_path, [cluster.root])
        coro = tune_on_session(cluster.session, prepared, cluster.options,
                               TuneOptions(autotune=True, calibrate=True), said.append)
        return cluster.loop.run_until_complete(asyncio.wait_for(coro, 120))

    tuned = tuned_run()
    assert tuned.result.ok, tuned.result.reason
    probes = [line for line in said if line.startswith("calibration: probe at")]
    # 256^3 with tiles of 128 or 256: the most units (128^3, 4 units) and the fewest that leave
    # no node idle (2 units) are probed, each twice (in order, then in reverse); 256 x 256 x *
    # (1 unit) is dropped on 2 nodes.
    assert len(probes) == 4 and probes[:2] == probes[:1:-1] and probes[0] != probes[1]
    table = "\n".join(said)
    assert "(calibrated on the pods)" in table and "dropped: 1 super-tile(s) for 2 nodes" in table
    assert dict(tuned.prepared.program.cluster_values) == dict(tuned.ranking.best.values)
    arrays = {"A": cluster.arrays["A"], "B": cluster.arrays["B"], "C": cluster.arrays["C0"]}
    want = reference(JOB_KERNELS / "matmul.phk", dims, arrays, scalars)["C"]
    # sums of 256 products in other orders: far below 1e-4 of the output's scale (see test_matmul_attention)
    np.testing.assert_allclose(np.load(cluster.root / "C.npy"), want, rtol=1e-4,
                               atol=1e-4 * float(np.abs(want).max()))
    assert not [p for p in cluster.root.iterdir() if "probe" in p.name]  # scratch outputs removed
    cache = json.loads((tmp_path / "cache" / cal.CACHE_FILE).read_text())
    assert len(cache["clusters"]) == 1 and len(cache["leaves"]) == 1
    (rates,) = cache["leaves"].values()
    # The K loop can be split, so the split candidates' leaves are timed too: merge (the tree) and
    # zero (a share other than the root starts at 0, since the store has beta).
    assert set(rates["rates"]) == {"init", "step", "merge", "zero"}

    # Again: the figures come from the cache, nothing is probed, and the same choice is made.
    said.clear()
    np.save(cluster.root / "C.npy", cluster.arrays["C0"])
    again = tuned_run()
    assert again.result.ok
    assert not [line for line in said if line.startswith("calibration: probe")]
    assert any("reusing measurements" in line for line in said)
    assert "from the cache" in "\n".join(said)
    assert again.ranking.best.values == tuned.ranking.best.values


def test_launch_times_are_measured_per_leaf_shape_and_override_the_line():
    from scheduler.tuning.tuner import NodeLoad, leaf_signature, predict

    small = program(step=1_000_000)
    other_dims = Leaf(name="step", kernel="k", source="", dims=(("M", 512),), tile_values=(("M", 64),),
                      grid=(1,), threads=256, tensors=(), scalars=(), flops=1_000_000)  # same FLOPs
    big = ClusterProgram("k", "", (), (), (), (1,), (), (), (other_dims,), ())
    events_small = [event(0, i, "compute", i, i + 0.01, leaf_name="step") for i in range(4)]
    events_big = [event(0, i, "compute", i, i + 0.05, leaf_name="step") for i in range(4)]
    times = fit.measure_launch_times([probe(events_small, small, 5.0), probe(events_big, big, 5.0)])
    assert times == {leaf_signature(small.leaves[0]): pytest.approx(0.01),
                     leaf_signature(big.leaves[0]): pytest.approx(0.05)}
    figures = Figures(**{**BASE.__dict__, "launch_times": tuple(times.items())})
    load = NodeLoad(node=0, units=1, launches=(("step", 10, 10_000_000),), bytes_loaded=0, bytes_fetched=0,
                    bytes_served=0, bytes_stored=0, transfers=0, fetches=0, start_loaded=0, start_fetched=0,
                    end_stored=0, peak_bytes=0)
    sig = {"step": leaf_signature(big.leaves[0])}
    assert predict([load], figures, sig).busiest.compute_s == pytest.approx(0.5)  # 10 x 0.05 measured
    # without a measurement for this shape: the line, 1e7 FLOPs at 1e9 FLOP/s
    assert predict([load], figures, {"step": "other"}).busiest.compute_s == pytest.approx(0.01)
