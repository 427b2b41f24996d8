"""Security and bad input end to end (issue 7): the token guards every capability and never
reaches a log; storage URIs stay inside the operator's roots, refused before anything is read or
written; raw garbage on a pod's socket ends that connection only."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from common import log as plog
from common.cli import run_main
from scheduler import cli
from schemas import capnp_io, rpc_streams
from schemas.remote_errors import remote_reason
from tests.faults.harness import REPO, Pods, matmul_inputs, staging_files
from tests.job_files import make_job

rpc = capnp_io.rpc()
CLUSTER = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 128}


async def raw_client(address: str):
    import capnp

    host, port = address.rsplit(":", 1)
    stream = await rpc_streams.connect(host, int(port))
    return capnp.TwoPartyClient(stream, traversal_limit_in_words=capnp_io.TRAVERSAL_LIMIT_WORDS,
                                nesting_limit=capnp_io.NESTING_LIMIT)


def test_token_never_appears_in_any_log(tmp_path):
    """A whole job with a pod killed part-way, every program logging at debug level: neither
    the cluster's token nor a wrong one tried against a pod shows up in any log line."""
    matmul_inputs(tmp_path, 256, 256, 256, seed=4)
    pods = Pods(tmp_path, tmp_path / "logs", log_level="debug")
    sched_log = io.StringIO()
    plog.configure("debug", stream=sched_log)
    wrong = "wrong-" + pods.token[::-1]
    try:
        order = pods.start(3) + pods.start(1, fault="kill-at=compute:2")
        job = make_job(tmp_path, "matmul_plain", {"M": 256, "N": 512, "K": 256},
                       {"A": "A", "B": "B", "C": "C"})
        np.save(tmp_path / "B.npy", np.ones((256, 512), np.float32))
        result = pods.run(pods.session(order), job, CLUSTER)
        assert result.ok and result.trace["failures"], result.reason

        async def intruder():
            client = await raw_client(order[0].address)
            try:
                await rpc_streams.login(client, wrong, 30)
            except rpc_streams.LoginRefused as err:
                return str(err)
            return "accepted"

        refusal = pods.loop.run_until_complete(intruder())
    finally:
        plog.configure("warning")
        pods.close()
    assert "login refused: wrong token" in refusal and wrong not in refusal
    texts = {p.log.name: p.log.read_text() for p in pods.pods}
    texts["scheduler"] = sched_log.getvalue()
    assert sum(len(t) for t in texts.values()) > 1000  # debug logs were really written
    assert any("login refused" in t for t in texts.values())
    for name, text in texts.items():
        assert pods.token not in text, f"the token leaked into {name}"
        assert wrong not in text, f"a tried token leaked into {name}"


def test_no_capability_before_login(tmp_path):
    """The bootstrap object is the Gate: calling a Pod method on it fails, whatever the token."""
    pods = Pods(tmp_path, tmp_path / "logs")
    try:
        pod = pods.start(1)[0]

        async def sneak():
            client = await raw_client(pod.address)
            sneaky = client.bootstrap().cast_as(rpc.Pod)
            outcomes = []
            for call in (lambda: sneaky.info(), lambda: sneaky.shutdown(), lambda: sneaky.cancel("x")):
                try:
                    await asyncio.wait_for(call(), 5)
                    outcomes.append("served")
                except Exception as err:
                    outcomes.append(remote_reason(err))
            return outcomes

        outcomes = pods.loop.run_until_complete(sneak())
        assert "served" not in outcomes, outcomes
        assert pod.alive  # shutdown() without login did nothing
    finally:
        pods.close()


def _pod_cmd(root, *extra):
    return [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
            "--storage-root", str(root), *extra]


def test_pod_needs_a_token_and_reads_it_from_a_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PHOBOS_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(_pod_cmd(tmp_path), env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no token" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "empty").write_text("\n")
    done = subprocess.run(_pod_cmd(tmp_path, "--token-file", str(tmp_path / "empty")), env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "holds no token" in done.stderr
    # from a file: a scheduler with the same file gets in, one with another token does not
    token_file = tmp_path / "token"
    token_file.write_text("file-token-0123456789\n")
    pod = subprocess.Popen(_pod_cmd(tmp_path, "--token-file", str(token_file)), env=env, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = pod.stdout.readline().split()[1]
        np.save(tmp_path / "a.npy", np.arange(1024, dtype=np.float32))
        np.save(tmp_path / "b.npy", np.ones(1024, np.float32))
        job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
        (tmp_path / "bad").write_text("other-token-0123456789\n")
        code = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--pods", address,
                               "--token-file", str(tmp_path / "bad"), "--storage-root", str(tmp_path)],
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert code.returncode == 2 and "refused the token" in code.stderr
        assert "other-token" not in code.stderr and not (tmp_path / "c.npy").exists()
        code = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--pods", address,
                               "--token-file", str(token_file), "--storage-root", str(tmp_path)],
                              env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert code.returncode == 0, code.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.arange(1024, dtype=np.float32) + 1)
    finally:
        pod.kill()
        pod.wait()


# ---- storage roots, end to end ----------------------------------------------------------------


def _run_cli(argv, capsys):
    with pytest.raises(SystemExit) as info:
        run_main(cli.main, argv)
    return info.value.code, capsys.readouterr().err


@pytest.fixture()
def confined(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    for folder in (root, outside):
        np.save(folder / "a.npy", np.zeros(1024, np.float32))
        np.save(folder / "b.npy", np.zeros(1024, np.float32))
    return root, outside


@pytest.mark.parametrize("uri, reason", [
    ("file:../outside/a.npy", ".."),
    ("file:sub/../a.npy", ".."),
    ("file:escape.npy", "outside the storage roots"),  # a symlink leading out
    ("http://example.com/a.npy", "file:"),
    ("s3://bucket/a.npy", "file:"),
    ("file://otherhost/tmp/a.npy", "host"),
])
def test_uris_outside_the_roots_are_refused_before_anything_is_written(confined, capsys, uri, reason):
    root, outside = confined
    (root / "escape.npy").symlink_to(outside / "a.npy")
    job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    from scheduler.jobs.jobfile import read_job, write_job

    text = read_job(job)
    tensors = tuple((name, uri if name == "a" else value) for name, value in text.tensors)
    write_job(type(text)(**{**text.__dict__, "tensors": tensors}), job)
    code, err = _run_cli([str(job), "--storage-root", str(root), "--local-pods", "1"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert reason in lines[0], lines[0]
    assert sorted(p.name for p in root.iterdir()) == ["a.npy", "b.npy", "escape.npy", "job.capnp"]
    assert staging_files(root) == []


def test_output_symlink_leading_out_is_refused_and_the_target_untouched(confined, capsys):
    root, outside = confined
    target = outside / "c.npy"
    np.save(target, np.full(1024, 9.0, np.float32))
    (root / "c.npy").symlink_to(target)
    job = make_job(root, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    code, err = _run_cli([str(job), "--storage-root", str(root), "--local-pods", "1"], capsys)
    assert code == 2 and "outside the storage roots" in err
    np.testing.assert_array_equal(np.load(target), np.full(1024, 9.0, np.float32))


# ---- raw bytes on a pod's socket -----------------------------------------------------------------


def _frame(words_per_segment: list[int]) -> bytes:
    """A Cap'n Proto stream frame header: segment count - 1, then each segment's size in words."""
    out = (len(words_per_segment) - 1).to_bytes(4, "little")
    out += b"".join(w.to_bytes(4, "little") for w in words_per_segment)
    if len(words_per_segment) % 2 == 0:
        out += b"\0" * 4
    return out


RAW_ATTACKS = {
    "garbage": b"\xff" * 64 + b"GET / HTTP/1.0\r\n\r\n" * 50,
    "huge-segment": _frame([0x0FFFFFFF]) + b"\0" * 64,
    "many-segments": (600).to_bytes(4, "little") + b"\1\0\0\0" * 601,
    "over-the-limit": _frame([capnp_io.TRAVERSAL_LIMIT_WORDS + 8]) + b"\0" * 4096,
    "bad-pointer": _frame([2]) + (0x7FFFFFFC).to_bytes(4, "little") + b"\1\0\1\0" + b"\0" * 8,
    "truncated": _frame([4]) + b"\0" * 7,
}


def test_raw_bytes_end_one_connection_and_the_pod_still_serves(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(1024, dtype=np.float32))
    np.save(tmp_path / "b.npy", np.ones(1024, np.float32))
    pods = Pods(tmp_path, tmp_path / "logs")
    try:
        pod = pods.start(1)[0]
        host, port = pod.address.rsplit(":", 1)
        for name, payload in RAW_ATTACKS.items():
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                try:
                    sock.sendall(payload)
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(1 << 16)
                except (TimeoutError, ConnectionError):
                    pass
            assert pod.alive, f"{name} took the pod down"
        job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
        result = pods.run(pods.session([pod]), job)
        assert result.ok, result.reason
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.arange(1024, dtype=np.float32) + 1)
    finally:
        pods.close()
