"""Fuzzing helpers shared by tests/faults/test_fuzz.py (a few hundred cases) and
tools/fuzz_soak.py (thousands): mutations of bytes and of kernel tokens, the verdict on a mutated
job file (a clear error, or a run whose output matches the reference interpreter), and a recorder
of a real client's byte stream to a pod, replayed mutated over raw sockets.

What counts as "clear": common.errors.UserError or compiler.frontend.diagnostics.CompileError (both print
one line, exit 2, no traceback), or for a job that ran, a failure with a reason. Anything else
escaping (an IndexError, a segfault, a hang) is a bug the fuzzer reports.
"""

from __future__ import annotations

import random
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError
from compiler.frontend.diagnostics import CompileError

CLEAR_ERRORS = (UserError, CompileError)

# ---- mutations --------------------------------------------------------------------------------


def mutate_bytes(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (op, position, value) edits: 0 replace a byte, 1 insert, 2 delete, 3 truncate,
    4 flip one bit. Positions wrap around the current length."""
    out = bytearray(data)
    for op, pos, value in edits:
        if not out:
            out.append(value)
            continue
        i = pos % len(out)
        if op == 0:
            out[i] = value
        elif op == 1:
            out.insert(i, value)
        elif op == 2:
            del out[i]
        elif op == 3:
            del out[max(1, i):]
        else:
            out[i] ^= 1 << (value % 8)
    return bytes(out)


TOKEN_RE = re.compile(r"\s+|//[^\n]*|[A-Za-z_][A-Za-z_0-9]*|\d+\.\d*|\d+|:\+|==|!=|<=|>=|[-+*/]=|.", re.S)
VOCABULARY = ["kernel", "let", "var", "for", "in", "range", "load", "expand", "dot", "sum", "max",
              "exp", "inf", "and", "or", "ctx", "block", "x", "y", "tile", "tensor", "f32", "f16", "i32",
              "@cluster", "@autotune", "@aligned", "(", ")", "[", "]", "{", "}", ",", ":", ":+", "=", "+=",
              "+", "-", "*", "/", "<", "==", "\n", " ", "0", "1", "2", "16", "0.5", "-1", "N", "M", "K",
              "BLOCK", "a", "b", "c", "axis", "fill", "999999999999", "1e40", "."]


def mutate_source(text: str, edits: list[tuple[int, int, int]]) -> str:
    """Token-level edits (op, position, choice): 0 delete a token, 1 duplicate it, 2 replace it
    with a vocabulary token, 3 insert a vocabulary token, 4 swap it with its neighbour."""
    tokens = TOKEN_RE.findall(text)
    for op, pos, choice in edits:
        if not tokens:
            tokens.append(VOCABULARY[choice % len(VOCABULARY)])
            continue
        i = pos % len(tokens)
        word = VOCABULARY[choice % len(VOCABULARY)]
        if op == 0:
            del tokens[i]
        elif op == 1:
            tokens.insert(i, tokens[i])
        elif op == 2:
            tokens[i] = word
        elif op == 3:
            tokens.insert(i, word)
        elif i + 1 < len(tokens):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    return "".join(tokens)


def random_edits(rng: random.Random, count: int, ops: int = 5) -> list[tuple[int, int, int]]:
    return [(rng.randrange(ops), rng.randrange(1 << 20), rng.randrange(256)) for _ in range(count)]


# ---- verdicts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "refused" (a clear error before running), "ran" (checked against the reference), "failed"
    detail: str = ""


def check_kernel_source(text: str) -> str:
    """'ok' or 'refused'; any exception other than a clear error propagates (a bug)."""
    from compiler.frontend.load import load_text

    try:
        load_text(text, "<fuzz>")
    except CLEAR_ERRORS:
        return "refused"
    return "ok"


def reference_outputs(prepared) -> dict[str, np.ndarray]:
    """The job's kernel run whole by the reference interpreter on its files (read before the run
    overwrites an output that the kernel also reads)."""
    from compiler.frontend.binding import bind, tensor_shape
    from compiler.frontend.load import load_text
    from compiler.interp.interpreter import run_kernel

    job = prepared.job
    kernel = load_text(job.kernel_source, "<job>").kernel(job.kernel_name)
    arrays = {name: np.load(t.path) if t.path.exists() else None for name, t in prepared.tensors.items()}
    binding = bind(kernel, dict(job.dims), {n: a.shape for n, a in arrays.items() if a is not None})
    for param in kernel.tensors:
        dtype = np.load(prepared.tensors[param.name].path, mmap_mode="r").dtype \
            if arrays[param.name] is not None else np.float32
        shape = tensor_shape(param, binding.env)
        arrays[param.name] = (np.zeros(shape, dtype) if arrays[param.name] is None
                              else arrays[param.name].copy())
    run_kernel(kernel, binding, arrays, dict(prepared.scalars))
    return arrays


def judge_job_bytes(data: bytes, root: Path, runner, name: str = "fuzz.capnp") -> Verdict:
    """Write a (mutated) job file and take it as far as it goes: read, prepare, run on `runner`'s
    pods, then compare every output with the reference interpreter (the `--expect` tolerance)."""
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare
    from scheduler.run_cli import compare
    from scheduler.running.run import JobFailed

    path = root / name
    path.write_bytes(data)
    try:
        job = read_job(path)
        prepared = prepare(job, path, [root], None)
    except CLEAR_ERRORS as err:
        return Verdict("refused", str(err).splitlines()[0])
    expected = reference_outputs(prepared)
    try:
        result = runner(path)
    except CLEAR_ERRORS as err:
        return Verdict("refused", str(err).splitlines()[0])
    except JobFailed as err:
        return Verdict("failed", str(err))
    if not result.ok:
        assert result.reason, "a failed job must say why"
        return Verdict("failed", result.reason)
    for place in prepared.outputs:
        got = np.load(place.path)
        want = expected[place.name].astype(got.dtype)
        problem = compare(place.name, got, want)
        assert problem is None, f"job ran but differs from the reference: {problem}\n{job.kernel_source}"
        place.path.unlink()
    return Verdict("ran")


def snapshot(root: Path) -> dict[Path, bytes]:
    """The folder's .npy files, to put back after a mutated job (one may name an input as its
    output: legal, and the run overwrites it)."""
    return {path: path.read_bytes() for path in root.glob("*.npy")}


def restore(root: Path, saved: dict[Path, bytes]) -> None:
    for path in root.glob("*.npy"):
        if path not in saved:
            path.unlink()
    for path, data in saved.items():
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)


# ---- a real client's bytes, recorded and replayed ------------------------------------------------


class Recorder:
    """A one-connection TCP proxy that records what the client sends to the pod."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.sent = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        client, _ = self.server.accept()
        upstream = socket.create_connection(self.target)

        def pump(src, dst, record):
            try:
                while data := src.recv(65536):
                    if record:
                        self.sent += data
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(upstream, client, False), daemon=True)
        back.start()
        pump(client, upstream, True)
        back.join(5)
        client.close()
        upstream.close()
        self.server.close()


def record_client_stream(pods, job: Path, root: Path, address: str) -> bytes:
    """A real client's bytes to the pod at `address` (through a Recorder): bootstrap, login, info,
    the submit of `job` (its files under `root`), a tile header request and a cancel. `pods` is
    the tests' harness.Pods, for its event loop and token."""
    import asyncio

    import capnp

    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare
    from scheduler.planning.planner import NodeFigure, plan
    from schemas import capnp_io, rpc_streams

    prepared = prepare(read_job(job), job, [root], None)
    node_plan = plan(prepared.program, [NodeFigure(0)], prepared.uris).node_plans[0]
    program = capnp_io.job_program(prepared.program, prepared.scalars, None)
    recorder = Recorder(address)

    async def talk():
        host, port = recorder.address.rsplit(":", 1)
        client = capnp.TwoPartyClient(await rpc_streams.connect(host, int(port)))
        pod = await rpc_streams.login(client, pods.token, 30)
        await pod.info()
        await capnp_io.send_submit(pod, "fuzzjob", program, node_plan, [])
        try:
            await pod.tileHeader("fuzzjob", 1, 0)
        except Exception:  # the tile may be refused; the bytes are what matter
            pass
        await pod.cancel("fuzzjob")
        client.close()

    pods.loop.run_until_complete(asyncio.wait_for(talk(), 30))
    recorder.thread.join(10)
    return bytes(recorder.sent)


def send_raw(address: str, payload: bytes, timeout: float = 2.0) -> bytes:
    """Send bytes to a pod, half-close, and read what comes back until it closes (or `timeout`)."""
    host, port = address.rsplit(":", 1)
    got = bytearray()
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while data := sock.recv(65536):
                got += data
        except (TimeoutError, ConnectionError):
            pass
    return bytes(got)
