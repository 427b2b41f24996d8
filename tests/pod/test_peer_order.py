"""Two real pods whose plans arrive apart: the fetcher's before the owner's, the owner's long
before the fetcher's, and a fetcher that gave up before the owner had its plan (the order of the
GPU+CPU hang: the owner's Free then waited for a release that never came, with no log line).
Whatever a pod waits on says so in its debug log, and every wait ends."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common import storage
from schemas import capnp_io
from tests.pod.harness import hello_all, logged, run_async, running_pods, submit
from tests.pod.test_pod_rpc import HALF, PROGRAM, add_plans, make_inputs, transfer_plans


@pytest.fixture(autouse=True)
def _debug_logs(monkeypatch):
    monkeypatch.setenv("PHOBOS_TEST_POD_LOG", "debug")  # what each pod waited on, in its log


def _events(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_a_fetcher_submitted_before_its_owner_waits_for_the_tile_and_gets_it(tmp_path):
    """The add plans in the GPU test's order: node 1 (fetching node 0's half of `a`) first. Its
    ask reaches node 0 before node 0 has the job; node 0 logs the wait and serves once loaded."""
    a, b, uris = make_inputs(tmp_path)
    staging = storage.create_staging(tmp_path / "c.npy", (2 * HALF,), "f32", "job-order")
    with running_pods(2, tmp_path) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]

        async def scenario():
            sink, links = await hello_all(procs)
            plans = add_plans(uris)
            await submit(links[1][1], "job-order", PROGRAM, plans[1], peers)
            await logged(tmp_path / "pod-0.log", "a peer waits for a tile", "job-order")
            await submit(links[0][1], "job-order", PROGRAM, plans[0], peers)
            return await sink.wait_finished([(0, "job-order", 1), (1, "job-order", 1)], timeout=30)

        assert run_async(scenario) == [(True, ""), (True, "")]
    waits = [e for e in _events(tmp_path / "pod-0.log") if e["event"] == "a peer waits for a tile"]
    assert waits and waits[0]["buffer"] == 3 and waits[0]["plan_here"] is False
    storage.commit(staging, tmp_path / "c.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)


def test_an_owner_whose_plan_is_done_but_its_free_still_serves_a_late_fetcher(tmp_path):
    """Node 0 loads its tile and has nothing left but the Free its peer's fetch holds (logged);
    node 1's plan comes only then, and still gets the tile."""
    x = np.arange(16, dtype=np.float32) - 3
    np.save(tmp_path / "x.npy", x)
    staging = storage.create_staging(tmp_path / "y.npy", (16,), "f32", "job-late")
    with running_pods(2, tmp_path) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]
        owner, fetcher = transfer_plans((tmp_path / "x.npy").as_uri(), (tmp_path / "y.npy").as_uri(), 16)

        async def scenario():
            sink, links = await hello_all(procs)
            await submit(links[0][1], "job-late", PROGRAM, owner, peers)
            await logged(tmp_path / "pod-0.log", "free waits for peers to fetch its tile", "job-late")
            assert (0, "job-late", 1) not in sink.plans_done
            await submit(links[1][1], "job-late", PROGRAM, fetcher, peers)
            return await sink.wait_finished([(0, "job-late", 1), (1, "job-late", 1)], timeout=30)

        assert run_async(scenario) == [(True, ""), (True, "")]
    held = [e for e in _events(tmp_path / "pod-0.log")
            if e["event"] == "free waits for peers to fetch its tile"]
    assert [(e["instruction"], e["buffer"], e["peers"]) for e in held] == [(2, 0, [1])]
    storage.commit(staging, tmp_path / "y.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x)


def test_an_owner_submitted_after_its_fetcher_gave_up_frees_the_tile_and_finishes(tmp_path):
    """Node 1's fetch fails before node 0 has any plan (node 0 answers, after its patience, that
    no plan of it produces the tile); node 1 drops the store that needed it, finishes, and tells
    node 0 it gave up. Node 0's plan comes after that: its Free of the tile must not wait for
    node 1, and its plan finishes; no serve is reported for a tile nobody fetched."""
    np.save(tmp_path / "x.npy", np.ones(16, np.float32))
    storage.create_staging(tmp_path / "y.npy", (16,), "f32", "job-gave-up")
    with running_pods(2, tmp_path, extra=("--fetch-timeout", "1")) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]
        owner, fetcher = transfer_plans((tmp_path / "x.npy").as_uri(), (tmp_path / "y.npy").as_uri(), 16)

        async def scenario():
            sink, links = await hello_all(procs)
            await submit(links[1][1], "job-gave-up", PROGRAM, fetcher, peers)
            first = await sink.wait_finished([(1, "job-gave-up", 1)], timeout=30)
            await logged(tmp_path / "pod-0.log", "a peer gave up fetching a tile", "job-gave-up")
            await submit(links[0][1], "job-gave-up", PROGRAM, owner, peers)
            return first + await sink.wait_finished([(0, "job-gave-up", 1)], timeout=30), sink.reported

        results, reported = run_async(scenario)
    assert results == [(True, ""), (True, "")]
    failed = [(node, e.kind, e.id) for node, e in reported if not e.ok]
    assert failed == [(1, "fetch", 1)]
    assert not [e for _, e in reported if e.kind in ("serve", "store")]
    assert [e.id for node, e in reported if node == 0 and e.kind == "free"] == [2]
    fetcher_log = _events(tmp_path / "pod-1.log")
    assert [e["reason"] for e in fetcher_log if e["event"] == "fetch failed"] == [
        next(e.message for _, e in reported if not e.ok)]
    gave_up = [e for e in _events(tmp_path / "pod-0.log") if e["event"] == "a peer gave up fetching a tile"]
    assert [(e["generation"], e["buffer"], e["peer"]) for e in gave_up] == [(1, 0, 1)]
