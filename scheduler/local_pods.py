"""Starting and stopping pods on this machine, for a job run without --pods.

One pod per visible GPU (CUDA_VISIBLE_DEVICES is honoured by CUDA itself), else two CPU pods;
`--local-pods N` overrides the count (GPU pods are then dealt round robin over the GPUs, so two
pods may share one). Each pod is `python -m pod.main --listen 127.0.0.1:0 ...` with the repo
root on PYTHONPATH; it prints `PHOBOS_POD_LISTENING host:port` once it listens. The cluster token
is random, made here, and reaches the pods only through their environment (never argv, which
other users can read in `ps`). PHOBOS_POD_MODULE names another module to run (development).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common.cluster_token import TOKEN_ENV
from common.errors import UserError
from common.log import get_logger

READY_LINE = "PHOBOS_POD_LISTENING "
START_TIMEOUT_S = 60.0
log = get_logger(program="scheduler")


def repo_root() -> Path:
    from common.paths import REPO_ROOT

    return Path(REPO_ROOT)


def visible_gpus() -> int:
    """How many CUDA devices this process can see (0 without cupy or a driver)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device: all mean "no GPU here"
        return 0


def choose_devices(count: int | None, gpus: int) -> list[str]:
    if count is not None and count < 1:
        raise UserError(f"--local-pods {count}: need at least one pod")
    if gpus == 0:
        return ["cpu"] * (count or 2)
    return [str(i % gpus) for i in range(count or gpus)]


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class LocalPod:
    device: str
    process: asyncio.subprocess.Process
    address: str = ""


@dataclass
class LocalPods:
    token: str
    pods: list[LocalPod] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.pods]

    async def stop(self, grace_s: float = 5.0) -> None:
        """Terminate every pod still running, then kill the ones that do not exit in time."""
        for pod in self.pods:
            if pod.process.returncode is None:
                try:
                    pod.process.terminate()
                except ProcessLookupError:
                    pass
        for pod in self.pods:
            try:
                await asyncio.wait_for(pod.process.wait(), grace_s)
            except TimeoutError:
                log.warning("local pod did not exit; killing it", pid=pod.process.pid)
                try:
                    pod.process.kill()
                except ProcessLookupError:
                    pass
                await pod.process.wait()


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads(cpu_pods: int, env: dict[str, str]) -> dict[str, str]:
    """Share the host's cores among the CPU pods started on it: each BLAS library would otherwise
    start a thread per core in every pod, and pods oversubscribing the cores made the same job's
    time vary twofold (measured by benchmarks/model_validation.py). A value the user set is kept."""
    if cpu_pods == 0:
        return {}
    per_pod = str(max(1, (os.cpu_count() or 1) // cpu_pods))
    return {name: per_pod for name in BLAS_THREAD_VARIABLES if name not in env}


async def start_local_pods(devices: list[str], roots: list[Path], token: str, extra_args: list[str] = (),
                           log_level: str = "warning") -> LocalPods:
    env = dict(os.environ)
    env[TOKEN_ENV] = token
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(blas_threads(sum(1 for d in devices if d == "cpu"), env))
    pods = LocalPods(token)
    try:
        for device in devices:
            module = os.environ.get("PHOBOS_POD_MODULE", "pod.main")
            argv = [sys.executable, "-m", module, "--listen", "127.0.0.1:0", "--device", device,
                    "--log-level", log_level, *extra_args]
            for r in roots:
                argv += ["--storage-root", str(r)]
            # A session of their own: a Ctrl-C at the terminal reaches the scheduler only, which
            # stops the job and then these pods in order (scheduler/interrupt.py).
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=root, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                start_new_session=True)
            pods.pods.append(LocalPod(device, process))
        for pod in pods.pods:
            pod.address = await _wait_ready(pod)
    except BaseException:
        await pods.stop(grace_s=2.0)
        raise
    log.debug("local pods started", addresses=pods.addresses, devices=devices)
    return pods


async def _wait_ready(pod: LocalPod) -> str:
    async def read_line() -> str:
        while True:
            raw = await pod.process.stdout.readline()
            if not raw:
                code = await pod.process.wait()
                raise UserError(f"local pod (device {pod.device}) exited with code {code} before listening; "
                                "its error is above")
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY_LINE):
                return line[len(READY_LINE):].strip()

    try:
        address = await asyncio.wait_for(read_line(), START_TIMEOUT_S)
    except TimeoutError:
        raise UserError(f"local pod (device {pod.device}) did not start listening within "
                        f"{START_TIMEOUT_S:g} s") from None
    # Keep draining stdout so a chatty pod can never block on a full pipe.
    asyncio.ensure_future(_drain(pod.process.stdout))
    return address


async def _drain(stream) -> None:
    while await stream.readline():
        pass
