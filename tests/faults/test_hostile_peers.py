"""Strangers on the sockets (issue 16, points 1 and 7): a `--pods` address that is not a pod ends
the scheduler with one line (exit 2), never a crash; the scheduler and the pods run on uvloop;
a pod bounds what connections that never log in can take (a login deadline, a cap on them,
memory back to its baseline, slow typed refusals, aggregated log lines).

Real processes and sockets throughout; every wait is for an event (a line in a log, a socket
closing, a file descriptor count), bounded by a generous timeout, never a sleep standing in
for one."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from pod.cli import FIRST_JOB_MODULES_IMPORTED
from schemas import capnp_io, rpc_streams
from tests.faults.harness import REPO, Pods
from tests.faults.strangers import SERVER_KINDS, HostileServer, flood, rss_mb
from tests.job_files import make_job

SUMMARY = "strangers in the last window"
TOKEN = "hostile-peers-test-token-0123456789"


def _env() -> dict[str, str]:
    env = dict(os.environ, PHOBOS_TOKEN=TOKEN)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _add_job(folder):
    np.save(folder / "a.npy", np.arange(1024, dtype=np.float32))
    np.save(folder / "b.npy", np.ones(1024, np.float32))
    return make_job(folder, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_an_address_that_is_not_a_pod_ends_the_scheduler_with_one_line(tmp_path, kind):
    """Under uvloop this was a segfault (exit 139, no word) for every kind but the HTTP one."""
    job = _add_job(tmp_path)
    with HostileServer(kind) as hostile:
        done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--pods", hostile.address,
                               "--storage-root", str(tmp_path)],
                              env=_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and hostile.address in lines[0] and "Traceback" not in done.stderr, lines
    assert not (tmp_path / "c.npy").exists()


def _pod(folder, *extra) -> tuple[subprocess.Popen, str]:
    log = open(folder / "pod.log", "w")
    argv = [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
            "--storage-root", str(folder), "--log-level", "info", *extra]
    process = subprocess.Popen(argv,
                               env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    line = process.stdout.readline()
    assert line.startswith("PHOBOS_POD_LISTENING "), (folder / "pod.log").read_text()[-2000:]
    return process, line.split()[1]


def _events(path) -> list[dict]:
    """The JSON log lines of a pod's log file."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _wait_for_background_imports(folder) -> None:
    """The pod imports its first job's modules in a thread once it listens (pod/cli.py), reading
    module files as it goes: a count of its descriptors or of its memory settles only after."""
    log = folder / "pod.log"
    _wait_for(lambda: [e for e in _events(log) if e.get("event") == FIRST_JOB_MODULES_IMPORTED], 60,
              "the pod's background imports")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _job_runs(folder, address: str) -> None:
    job = _add_job(folder)
    done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--pods", address,
                           "--storage-root", str(folder)],
                          env=_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_array_equal(np.load(folder / "c.npy"), np.arange(1024, dtype=np.float32) + 1)


def test_pod_runs_on_uvloop_and_strangers_do_not_take_it_down(tmp_path):
    """Every kind of stranger connection, then a Cap'n Proto client that speaks first (what
    crashed pods under uvloop), then a real job through the same pod."""
    pod, address = _pod(tmp_path)
    try:
        log = tmp_path / "pod.log"
        listening = _wait_for(lambda: [e for e in _events(log) if e.get("event") == "pod listening"], 30,
                              "the pod's 'listening' log line")
        assert listening[0]["loop"] == "uvloop"
        flood(address, 200)
        assert pod.poll() is None, (tmp_path / "pod.log").read_text()[-3000:]
        _job_runs(tmp_path, address)  # (and then the pod exits, its scheduler gone: by design)
    finally:
        pod.kill()
        pod.wait()


async def _try_login(address: str, token: str) -> tuple[str, float]:
    import capnp

    host, port = address.rsplit(":", 1)
    client = capnp.TwoPartyClient(await rpc_streams.connect(host, int(port)))
    gate = client.bootstrap().cast_as(capnp_io.rpc().Gate)
    started = time.monotonic()
    try:
        reply = await asyncio.wait_for(gate.login(token), 30)
        return str(reply.refusal), time.monotonic() - started
    except Exception as err:  # the refusal must come as data; an exception carries the traceback
        return f"exception: {err}", time.monotonic() - started


def test_refused_logins_are_typed_slow_one_per_connection_and_logged_once(tmp_path):
    pods = Pods(tmp_path, tmp_path / "logs")
    try:
        pod = pods.start(1)[0]

        async def many():
            return await asyncio.gather(*(_try_login(pod.address, f"guess-{i:04d}-{'x' * 20}")
                                          for i in range(12)),
                                        _try_login(pod.address, ""))

        outcomes = pods.loop.run_until_complete(many())
        refusals = [refusal for refusal, _ in outcomes]
        assert refusals == ["wrongToken"] * 12 + ["missingToken"], refusals
        assert min(took for _, took in outcomes) >= 0.9  # answered after the refusal delay
        # one "login refused" line in full; the other 12 only in the window's summary
        summary = _wait_for(lambda: [e for e in _events(pod.log) if e.get("event") == SUMMARY], 60,
                            "the failed-login summary")
        assert summary[0]["refused_logins"] == 13
        refused_lines = [e for e in _events(pod.log) if e.get("event") == "login refused"]
        assert len(refused_lines) == 1 and "guess" not in pod.log.read_text()
        assert pod.alive
    finally:
        pods.close()


def _closed_by_pod(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_login_deadline_and_a_cap_on_connections_not_logged_in(tmp_path):
    pod, address = _pod(tmp_path, "--login-timeout", "2", "--max-pending-logins", "4")
    host, port = address.rsplit(":", 1)
    try:
        _wait_for_background_imports(tmp_path)  # they open files: the count moves until they end
        base = _open_fds(pod.pid)
        idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
        # the pod has accepted all four (each holds a descriptor there) before the fifth arrives
        _wait_for(lambda: _open_fds(pod.pid) >= base + 4, 30, "the pod to accept four connections")
        extra = socket.create_connection((host, int(port)), timeout=10)
        assert _closed_by_pod(extra, 10), "a fifth connection not logged in was served"
        # the idle four are closed by the deadline, however long one waits on them
        for sock in idle:
            assert _closed_by_pod(sock, 30), "an idle connection outlived the login deadline"
            sock.close()
        extra.close()
        _wait_for(lambda: _open_fds(pod.pid) <= base, 30, "the pod to drop the idle connections")
        assert pod.poll() is None
        _job_runs(tmp_path, address)  # the door is open again for someone with the token
    finally:
        pod.kill()
        pod.wait()


def test_garbage_connections_leave_the_pods_memory_at_its_baseline(tmp_path):
    """3,000 strangers (the issue measured 1.1-1.7 KB kept per connection, never freed: +4 MB
    or more here); tools/soak_hostile.py --connections 20000 measures the issue's figure."""
    pod, address = _pod(tmp_path)
    try:
        # the background imports' growth is no leak either, so the baseline is taken after them
        _wait_for_background_imports(tmp_path)
        flood(address, 300)  # warm up: the loop's and allocator's first-use growth is no leak
        fds = _open_fds(pod.pid)
        baseline = rss_mb(pod.pid)
        flood(address, 3000, start=300)
        _wait_for(lambda: _open_fds(pod.pid) <= fds, 60, "the pod to close the strangers' connections")
        grown = rss_mb(pod.pid) - baseline
        assert grown < 2.0, f"the pod's memory grew {grown:.1f} MB over 3,000 garbage connections"
        assert pod.poll() is None
        _job_runs(tmp_path, address)
    finally:
        pod.kill()
        pod.wait()
