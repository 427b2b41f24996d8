"""Real pod processes on loopback: login, plans with loads, peer fetches, computes and stores."""

from __future__ import annotations

import asyncio
import socket
import time

import numpy as np
import pytest

from common import storage
from schemas import capnp_io
from schemas.instructions import Allocate, Compute, Fetch, Free, Load, NodePlan, Store
from schemas.program import Leaf, Region, TensorInfo
from schemas.remote_errors import check
from tests.pod.harness import Sink, connect, hello_all, remote_message, run_async, running_pods, submit

ADD_LEAF_SOURCE = """
@autotune(BLOCK in [16, 4096])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""
HALF = 64
LEAF = Leaf(name="main", kernel="add", source=ADD_LEAF_SOURCE, dims=(("N", HALF),),
            tile_values=(("BLOCK", 16),), grid=(HALF // 16,), threads=256, tensors=("a", "b", "c"),
            scalars=())
PROGRAM = capnp_io.JobProgram(
    kernel="add", leaves=(LEAF,), scalars=(),
    tensors=tuple(TensorInfo(n, "f32", (2 * HALF,), r) for n, r in
                  (("a", "input"), ("b", "input"), ("c", "output"))),
    leaf_writes=(("main", ("c",)),))


def region(name: str, half: int) -> Region:
    return Region(name, (half * HALF,), (HALF,))


def add_plans(uris: dict[str, str], generation: int = 1) -> tuple[NodePlan, NodePlan]:
    """c = a + b over two halves. Node 0 loads both halves of `a` and serves the second to node 1,
    which fetches it instead of loading it (the planner's one-loader rule)."""
    tensors = (uris["a"], uris["b"], uris["c"])  # loads and stores name these by index
    node0 = NodePlan(node=0, generation=generation, peak_bytes=4 * HALF * 4, instructions=(
        Allocate(0, (), 0, (HALF,)), Load(1, (0,), 0, 0, region("a", 0)),
        Allocate(2, (), 1, (HALF,)), Load(3, (2,), 1, 1, region("b", 0)),
        Allocate(4, (), 2, (HALF,)),
        Allocate(5, (), 3, (HALF,)), Load(6, (5,), 3, 0, region("a", 1)),
        Compute(7, (1, 3, 4), "main", (("a", 0), ("b", 1), ("c", 2)), unit=0),
        Store(8, (7,), 2, 2, region("c", 0), unit=0),
        Free(9, (7,), 0), Free(10, (7,), 1), Free(11, (8,), 2), Free(12, (6,), 3, peers=(1,)),
    ), uris=tensors)
    node1 = NodePlan(node=1, generation=generation, peak_bytes=3 * HALF * 4, instructions=(
        Allocate(0, (), 0, (HALF,)), Fetch(1, (0,), 0, peer=0, peer_buffer=3),
        Allocate(2, (), 1, (HALF,)), Load(3, (2,), 1, 1, region("b", 1)),
        Allocate(4, (), 2, (HALF,)),
        Compute(5, (1, 3, 4), "main", (("a", 0), ("b", 1), ("c", 2)), unit=1),
        Store(6, (5,), 2, 2, region("c", 1), unit=1),
        Free(7, (5,), 0), Free(8, (5,), 1), Free(9, (6,), 2),
    ), uris=tensors)
    return node0, node1


def make_inputs(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(2 * HALF).astype(np.float32)
    b = rng.standard_normal(2 * HALF).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "c.npy", np.full(2 * HALF, -1, np.float32))
    uris = {n: (tmp_path / f"{n}.npy").as_uri() for n in "abc"}
    return a, b, uris


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    """Pods shared by the tests that never say hello (a pod exits when its scheduler leaves)."""
    root = tmp_path_factory.mktemp("storage")
    with running_pods(2, root) as pods:
        yield root, pods


@pytest.fixture
def fresh_pods(tmp_path):
    with running_pods(2, tmp_path) as pods:
        yield tmp_path, pods


def test_two_pods_load_fetch_compute_store(fresh_pods):
    root, procs = fresh_pods
    a, b, uris = make_inputs(root)
    staging = storage.create_staging(root / "c.npy", (2 * HALF,), "f32", "job-add")
    peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]

    async def scenario():
        sink = Sink()
        links = [await connect(addr) for _, addr in procs]
        infos = []
        for node, (_, pod) in enumerate(links):
            infos.append(capnp_io.read_pod_info((await pod.hello(sink, node)).info))
        plans = add_plans(uris)
        # node 1 first: its fetch must wait for node 0's load, which has not even been submitted
        await submit(links[1][1], "job-add", PROGRAM, plans[1], peers)
        # node 0's 13 instructions travel in 4 parts, as a plan too big for one message would
        await submit(links[0][1], "job-add", PROGRAM, plans[0], peers, part_instructions=4)
        results = await sink.wait_finished([(0, "job-add", 1), (1, "job-add", 1)])
        await asyncio.sleep(0.2)  # let the last event batch and heartbeat arrive
        return infos, results, sink

    infos, results, sink = run_async(scenario)
    assert results == [(True, ""), (True, "")]
    assert [i.backend for i in infos] == ["cpu", "cpu"]
    assert all(i.vram_bytes > 0 and i.pid > 0 and i.device_index == -1 for i in infos)
    assert all(i.compute_capability == 0 for i in infos)  # no GPU: the leaves need no PTX
    storage.commit(staging, root / "c.npy")
    np.testing.assert_array_equal(np.load(root / "c.npy"), a + b)  # f32 add: bitwise equal
    kinds = {(node, e.kind) for node, e in sink.reported}
    assert {(0, "load"), (0, "compute"), (0, "store"), (0, "serve"), (1, "fetch"), (1, "compute")} <= kinds
    fetch = next(e for node, e in sink.reported if e.kind == "fetch")
    assert fetch.peer == 0 and fetch.bytes == HALF * 4 and fetch.ok
    serve = next(e for node, e in sink.reported if e.kind == "serve")
    assert serve.peer == 1 and serve.id == 3
    compute = next(e for node, e in sink.reported if e.kind == "compute" and node == 1)
    assert compute.unit == 1 and compute.leaf == "main" and compute.end >= compute.start
    assert len([e for _, e in sink.reported]) == 13 + 10 + 1  # every instruction plus the serve
    assert sink.beats and {hb[0] for hb in sink.beats} <= {0, 1}


def test_a_plan_sent_before_its_staging_copy_exists_stores_only_once_told(fresh_pods):
    """`staged` false: both pods load, fetch and compute at once, but no store writes (there is no
    staging copy yet: a store would fail) until `outputsStaged`; then the plans finish."""
    root, procs = fresh_pods
    a, b, uris = make_inputs(root)
    peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]

    async def scenario():
        sink, links = await hello_all(procs)
        for node, plan in enumerate(add_plans(uris)):
            await submit(links[node][1], "job-held", PROGRAM, plan, peers, staged=False)
        deadline = time.monotonic() + 30
        while {node for node, e in sink.reported if e.kind == "compute"} != {0, 1}:
            assert time.monotonic() < deadline, sink.reported
            await asyncio.sleep(0.05)
        before = ({e.kind for _, e in sink.reported}, dict(sink.plans_done))
        staging = storage.create_staging(root / "c.npy", (2 * HALF,), "f32", "job-held")
        for _, pod in links:
            await pod.outputsStaged("job-held")
        results = await sink.wait_finished([(0, "job-held", 1), (1, "job-held", 1)])
        return before, results, staging

    (kinds, finished), results, staging = run_async(scenario)
    assert {"load", "fetch", "compute"} <= kinds and "store" not in kinds and finished == {}
    assert results == [(True, ""), (True, "")]
    storage.commit(staging, root / "c.npy")
    np.testing.assert_array_equal(np.load(root / "c.npy"), a + b)


def test_wrong_or_missing_token_is_refused(pods):
    _, procs = pods

    async def scenario():
        messages = []
        for token in ("wrong-token", ""):
            try:
                await connect(procs[0][1], token)
            except Exception as err:  # pycapnp raises KjException for a remote refusal
                messages.append(remote_message(err))
        # the pod still serves a correct login afterwards
        _, pod = await connect(procs[0][1])
        info = capnp_io.read_pod_info((await pod.info()).info)
        return messages, info

    messages, info = run_async(scenario)
    assert "login refused: wrong token" in messages[0]
    assert "login refused: missing token" in messages[1]
    assert info.backend == "cpu"


def test_bad_plans_and_a_cancelled_jobs_requests_are_refused_with_reasons(pods):
    root, procs = pods
    _, _, uris = make_inputs(root)
    outside = "file:///etc/passwd"

    async def scenario():
        _, pod = await connect(procs[0][1])
        messages = []
        bad = NodePlan(0, 1, (Allocate(0, (), 0, (HALF,)), Load(1, (0,), 0, 0, region("a", 0))), 0,
                       uris=(outside,))
        cycle = NodePlan(0, 1, (Allocate(0, (1,), 0, (HALF,)), Free(1, (0,), 0)), 0)
        for plan in (bad, cycle):
            try:
                await submit(pod, "job-gen", PROGRAM, plan, [])
            except Exception as err:
                messages.append(remote_message(err))
        await submit(pod, "job-gen", PROGRAM, NodePlan(0, 3, (), 0), [])
        await submit(pod, "job-gen", PROGRAM, NodePlan(0, 2, (), 0), [])  # an older one runs beside it
        await pod.cancel("job-gen")
        try:
            await submit(pod, "job-gen", PROGRAM, add_plans(uris, generation=4)[0], [])
        except Exception as err:
            messages.append(remote_message(err))
        try:
            check(await pod.tileHeader("job-gen", 3, 0))
        except Exception as err:
            messages.append(remote_message(err))
        return messages

    messages = run_async(scenario)
    assert "outside the storage roots" in messages[0]
    assert "cycle" in messages[1]
    assert "job job-gen was cancelled" in messages[2]
    assert "job job-gen was cancelled" in messages[3]


def test_malformed_and_oversized_messages_do_not_crash_the_pod(pods):
    _, procs = pods
    host, port = procs[0][1].rsplit(":", 1)
    # garbage bytes where a Cap'n Proto message is expected
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"\xff" * 64 + b"GET / HTTP/1.0\r\n\r\n" * 100)
        sock.settimeout(5)
        try:
            sock.recv(1024)
        except (TimeoutError, ConnectionError):
            pass
    # a frame header announcing a ~2 GiB segment, then nothing
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall((0).to_bytes(4, "little") + (0x0FFFFFFF).to_bytes(4, "little") + b"\0" * 64)

    async def oversized():
        # this client's own limit is raised so that it sends what the pod must refuse
        _, pod = await connect(procs[0][1], limit_words=4 * capnp_io.TRAVERSAL_LIMIT_WORDS)
        big = "x" * (capnp_io.TRAVERSAL_LIMIT_WORDS * 8 + 4096)
        leaf = Leaf(**{**LEAF.__dict__, "source": big})
        program = capnp_io.JobProgram(kernel="add", leaves=(leaf,), scalars=(), tensors=())
        try:
            await submit(pod, "job-big", program, NodePlan(0, 1, (), 0), [])
        except Exception as err:
            return remote_message(err)
        return "accepted"

    result = run_async(oversized)
    # the pod drops that one connection (Cap'n Proto's answer to a message over the limit)
    assert result != "accepted" and ("disconnect" in result.lower() or "limit" in result.lower())

    async def still_alive():
        _, pod = await connect(procs[0][1])
        return capnp_io.read_pod_info((await pod.info()).info)

    assert run_async(still_alive).backend == "cpu"
    assert all(proc.poll() is None for proc, _ in procs)


def test_pod_exits_when_its_scheduler_disconnects(tmp_path):
    with running_pods(1, tmp_path, extra=("--heartbeat-interval", "0.05")) as procs:
        proc, address = procs[0]

        async def scenario():
            sink = Sink()
            client, pod = await connect(address)
            await pod.hello(sink, 0)
            await asyncio.sleep(0.3)
            return len(sink.beats)

        beats = run_async(scenario)  # leaving the loop closes the scheduler's connection
        assert beats >= 2
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.returncode == 0


def transfer_plans(uri_in: str, uri_out: str, n: int) -> tuple[NodePlan, NodePlan]:
    """Node 0 loads x; node 1 fetches it and stores it into the staging copy of y."""
    node0 = NodePlan(node=0, generation=1, peak_bytes=n * 4, instructions=(
        Allocate(0, (), 0, (n,)), Load(1, (0,), 0, 0, Region("x", (0,), (n,))),
        Free(2, (1,), 0, peers=(1,))), uris=(uri_in,))
    node1 = NodePlan(node=1, generation=1, peak_bytes=n * 4, instructions=(
        Allocate(0, (), 0, (n,)), Fetch(1, (0,), 0, peer=0, peer_buffer=0),
        Store(2, (1,), 0, 0, Region("y", (0,), (n,)), unit=0), Free(3, (2,), 0)), uris=(uri_out,))
    return node0, node1


@pytest.mark.parametrize("flags", [(), ("--no-data-port",)], ids=["bulk-port", "rpc-chunks"])
def test_multi_chunk_tile_moves_intact(tmp_path, flags):
    n = 5 * capnp_io.CHUNK_BYTES // 8 + 3  # 2.5 chunks of f32 plus a ragged tail
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    staging = storage.create_staging(tmp_path / "y.npy", (n,), "f32", "job-move")
    with running_pods(2, tmp_path, extra=flags) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]
        plans = transfer_plans((tmp_path / "x.npy").as_uri(), (tmp_path / "y.npy").as_uri(), n)

        async def scenario():
            sink, links = await hello_all(procs)
            for node in (1, 0):
                await submit(links[node][1], "job-move", PROGRAM, plans[node], peers)
            return await sink.wait_finished([(0, "job-move", 1), (1, "job-move", 1)])

        assert run_async(scenario) == [(True, ""), (True, "")]
    storage.commit(staging, tmp_path / "y.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x)


def test_fetch_gives_up_on_a_peer_within_bounded_time(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(16, np.float32))
    storage.create_staging(tmp_path / "y.npy", (16,), "f32", "job-stuck")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_address = f"127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there
    with running_pods(2, tmp_path, extra=("--fetch-timeout", "1")) as procs:
        _, plan1 = transfer_plans((tmp_path / "x.npy").as_uri(), (tmp_path / "y.npy").as_uri(), 16)

        async def scenario():
            sink, links = await hello_all(procs)
            start = time.monotonic()
            # node 0 never gets a plan: its buffer never becomes ready
            await submit(links[1][1], "job-stuck", PROGRAM, plan1, [capnp_io.Peer(0, procs[0][1])])
            stuck = await sink.wait_finished([(1, "job-stuck", 1)], timeout=15)
            stuck_s = time.monotonic() - start
            # a peer that is not there at all
            await submit(links[0][1], "job-dead", PROGRAM, plan1, [capnp_io.Peer(0, dead_address)])
            dead = await sink.wait_finished([(0, "job-dead", 1)], timeout=15)
            return stuck[0], stuck_s, dead[0], sink.reported

        (ok1, _), stuck_s, (ok2, _), reported = run_async(scenario)
    # A failed fetch drops what depends on it (here the store) and the plan runs to its end; the
    # failed fetch event says why, and the scheduler blames the peer and re-plans the store.
    assert ok1 and ok2 and stuck_s < 10
    failed = [e for _, e in reported if not e.ok]
    assert [e.kind for e in failed] == ["fetch", "fetch"]
    # node 0 answers, but nothing there will fill the buffer: a refusal the fetcher gives up on
    assert "no plan of generation 1 on this node produces it (waited 1 s)" in failed[0].message
    assert "node 0" in failed[1].message and dead_address in failed[1].message
    assert not [e for _, e in reported if e.kind == "store"]


class HungSink(Sink):
    async def heartbeat(self, node, generation, running, _context, **kwargs):
        await asyncio.sleep(3600)  # a scheduler that accepts the call and never answers


def test_pod_exits_when_heartbeats_stop_being_answered(tmp_path):
    flags = ("--heartbeat-interval", "0.1", "--scheduler-timeout", "1")
    with running_pods(1, tmp_path, extra=flags) as procs:
        proc, address = procs[0]

        async def scenario():
            client, pod = await connect(address)
            await pod.hello(HungSink(), 0)
            start = time.monotonic()
            while proc.poll() is None and time.monotonic() - start < 10:
                await asyncio.sleep(0.05)
            return time.monotonic() - start

        waited = run_async(scenario)  # the connection stays open all along
        assert proc.returncode == 0
        assert waited < 5  # two unanswered heartbeats of --scheduler-timeout each, not forever
    assert "scheduler unreachable; exiting" in (tmp_path / "pod-0.log").read_text()


def test_a_waiting_peer_is_refused_when_the_job_is_cancelled(pods):
    _, procs = pods

    async def scenario():
        _, pod = await connect(procs[1][1])
        waiting = asyncio.ensure_future(pod.tileHeader("job-wait", 1, 0))  # no plan yet: it waits
        await asyncio.sleep(0.2)
        assert not waiting.done()
        start = time.monotonic()
        await pod.cancel("job-wait")
        try:
            check(await waiting)
        except Exception as err:
            return remote_message(err), time.monotonic() - start
        return "served", 0.0

    message, waited = run_async(scenario)
    assert "job job-wait was cancelled" in message and waited < 2


def _offer_then_fetch(tmp_path, job: str, seed: int, after_offer_s: float = 0.0) -> str:
    """A two-pod transfer in which the owner's offer (tileReady) reaches the fetcher before the
    fetcher's plan is submitted, `after_offer_s` later; checks the bytes that arrived and returns
    the fetcher's log."""
    n = 3 * capnp_io.CHUNK_BYTES // 4 + 5
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    staging = storage.create_staging(tmp_path / "y.npy", (n,), "f32", job)
    with running_pods(2, tmp_path) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]
        plans = transfer_plans((tmp_path / "x.npy").as_uri(), (tmp_path / "y.npy").as_uri(), n)
        fetcher_log = tmp_path / "pod-1.log"

        async def scenario():
            sink, links = await hello_all(procs)
            await submit(links[0][1], job, PROGRAM, plans[0], peers)
            deadline = time.monotonic() + 60
            while "tile offered" not in fetcher_log.read_text():  # the owner's offer came first
                assert time.monotonic() < deadline, fetcher_log.read_text()
                await asyncio.sleep(0.02)
            await asyncio.sleep(after_offer_s)
            await submit(links[1][1], job, PROGRAM, plans[1], peers)
            return await sink.wait_finished([(0, job, 1), (1, job, 1)])

        assert run_async(scenario) == [(True, ""), (True, "")]
        log = fetcher_log.read_text()
    storage.commit(staging, tmp_path / "y.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x)
    return log


def test_a_cpu_owner_offers_its_tile_with_a_ticket_and_the_fetch_asks_nothing(tmp_path, monkeypatch):
    """A CPU owner whose tile becomes servable sends the fetcher its header, CRC-32C and a data-port
    ticket (tileReady) before the fetcher asks; the fetch then moves the bytes without a
    tileHeader round trip (its log names the path), and they arrive intact."""
    monkeypatch.setenv("PHOBOS_TEST_POD_LOG", "debug")
    assert '"path": "bulk-port-offered"' in _offer_then_fetch(tmp_path, "job-offer", 2)


def test_an_expired_offered_ticket_makes_the_fetcher_ask_the_owner_and_the_tile_arrives_intact(
        tmp_path, monkeypatch):
    """The owner's offered ticket has expired by the time the fetch runs: the data port refuses
    it, the fetcher says so and asks the owner (tileHeader) for the tile again, and the bytes
    arrive intact (over a new ticket, or over the RPC chunks where that one lapses too)."""
    monkeypatch.setenv("PHOBOS_TEST_POD_LOG", "debug")
    monkeypatch.setenv("PHOBOS_TEST_TICKET_TTL_S", "0.2")
    # a lower bound, not a guess at a speed: past it the offered ticket has expired
    log = _offer_then_fetch(tmp_path, "job-expired", 3, after_offer_s=0.4)
    assert "offered ticket failed; asking the owner for another" in log
    assert '"path": "bulk-port-offered"' not in log
