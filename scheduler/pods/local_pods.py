"""Starting and stopping pods on this machine, for a job run without --pods.

One pod per visible GPU (CUDA_VISIBLE_DEVICES is honoured by CUDA itself), else two CPU pods;
`--local-pods N` overrides the count (GPU pods are then dealt round robin over the GPUs, so two
pods may share one). Each pod is `python -m pod.main --listen 127.0.0.1:0 ...` with the repo
root on PYTHONPATH; it prints `PHOBOS_POD_LISTENING host:port` once it listens. The cluster token
is random, made here, and reaches the pods only through their environment (never argv, which
other users can read in `ps`). PHOBOS_POD_MODULE names another module to run (development).
"""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
import weakref
from pathlib import Path

from common import blas, options
from common.cluster_token import TOKEN_ENV
from common.errors import UserError
from common.log import get_logger
from scheduler.pods import forked_pod, process_end

READY_LINE = "PHOBOS_POD_LISTENING "  # what pod/cli.py prints once it listens


def read_ready_line(child) -> None:
    """Read a pod process's stdout (`child.popen`) to its end: the address of its first READY_LINE
    goes to `child.address`, and `child.said` is set then, or at the end if it never said one.
    The pipe is closed at its end: left to the garbage collector it was an open file per pod until
    then (and a ResourceWarning wherever the collection happened to run)."""
    with child.popen.stdout as out:
        for raw in out:
            line = raw.decode(errors="replace").strip()
            if child.address is None and line.startswith(READY_LINE):
                child.address = line[len(READY_LINE):].strip()
                child.said.set()
    child.said.set()


START_TIMEOUT_S = 60.0
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the NVIDIA driver drives
log = get_logger(program="scheduler")
# asyncio is imported inside the coroutines below, not here: a command imports this module to start
# its pods first thing, and asyncio (30 ms with ssl) would delay them; a coroutine runs on a loop,
# so by then it is loaded and the import is a lookup.


def repo_root() -> Path:
    from common.paths import REPO_ROOT

    return Path(REPO_ROOT)


def visible_gpus() -> int:
    """How many CUDA devices this process can see (0 without a driver or a device).

    Read from the driver's /proc entries and CUDA_VISIBLE_DEVICES where the driver has them:
    importing cupy and initialising CUDA to count devices costs the command about half a second
    before its pods can start. Elsewhere (no /proc entries): cupy's count."""
    gpus = DRIVER_GPUS
    if not gpus.is_dir():
        return _cupy_device_count()
    present = sum(1 for _ in gpus.iterdir())
    chosen = options.current().visible_devices
    if chosen is None:
        return present
    count = 0
    for item in chosen.split(","):  # CUDA stops at the first entry that names no device
        item = item.strip()
        if item.isdigit() and int(item) < present or item.startswith(("GPU-", "MIG-")):
            count += 1
        else:
            break
    return count


def _cupy_device_count() -> int:
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
    """32 random bytes from the OS, URL-safe: secrets.token_urlsafe(32) spelled out, as `secrets`
    imports hashlib, hmac and random (6 ms before the command's pods start)."""
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode("ascii")


class PodProcess:
    """A local pod's process, started without waiting, so a command can start its pods before
    its event loop exists (first thing: their start-up then overlaps the command's own imports
    and compile); asyncio waits on top. A CPU pod is forked from a command that has loaded
    nothing heavy yet (scheduler/pods/forked_pod.py), any other is a fresh interpreter (Popen).
    `start_reading` starts a thread reading the pod's stdout: the ready line, then anything else
    (a chatty pod never blocks on a full pipe)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, fork: bool = False):
        if fork:
            self.popen = forked_pod.fork_pod(argv[argv.index("-m") + 2:], env, cwd)
        else:
            # A session of their own: a Ctrl-C at the terminal reaches the scheduler only, which
            # stops the job and then these pods in order (scheduler/running/interrupt.py).
            import subprocess  # here, not at the top: a forked CPU pod starts ~5 ms sooner without it

            self.popen = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, start_new_session=True)
        self.pid = self.popen.pid
        self.address: str | None = None
        self.said = threading.Event()  # the ready line came, or stdout ended without it

    def start_reading(self) -> None:
        threading.Thread(target=self._read, name=f"pod-{self.pid}-stdout", daemon=True).start()

    def _read(self) -> None:
        read_ready_line(self)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def terminate(self) -> None:
        self.popen.terminate()

    def kill(self) -> None:
        self.popen.kill()

    async def wait(self) -> int:
        """The exit code, once the process has ended. Woken by the kernel through a pidfd where
        there is one: polling found a stopped pod 5-10 ms after its end, on every command's exit."""
        import asyncio

        if self.popen.poll() is None:
            pidfd = process_end.pidfd_of(self.pid)
            if pidfd is None:
                await self._poll_until_exit()
            else:
                loop = asyncio.get_running_loop()
                ended = loop.create_future()
                loop.add_reader(pidfd, lambda: ended.done() or ended.set_result(None))
                try:
                    await ended
                finally:
                    loop.remove_reader(pidfd)
                    os.close(pidfd)
        return self.popen.wait()  # reaps it, at once now

    def wait_blocking(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the process to end and reap it: whether it ended. Woken by
        the kernel through a pidfd where there is one (Popen.wait with a timeout polls, with
        sleeps growing to 50 ms)."""
        if self.popen.poll() is None:
            process_end.wait_for_end(self.pid, timeout_s, lambda: self.popen.poll() is not None)
        return self.popen.poll() is not None

    async def _poll_until_exit(self) -> None:
        import asyncio

        pause = 0.001
        while self.popen.poll() is None:
            await asyncio.sleep(pause)
            pause = min(0.02, pause * 2)


class LocalPod:
    """One started pod: its device, process, and address once it listens. Plain classes here
    and below: the command imports this module before it starts its pods, and `dataclasses`
    (with `inspect`, 7-10 ms) would load first."""

    def __init__(self, device: str, process: PodProcess, address: str = ""):
        self.device = device
        self.process = process
        self.address = address


class LocalPods:
    """The pods a command or a test started, and the token they were given."""

    def __init__(self, token: str, pods: list[LocalPod] | None = None):
        self.token = token
        self.pods: list[LocalPod] = pods if pods is not None else []
        _STARTED.add(self)

    @property
    def addresses(self) -> list[str]:
        return [p.address for p in self.pods]

    async def ready(self) -> LocalPods:
        """Wait until every pod listens (stopping them all if one does not)."""
        try:
            for pod in self.pods:
                pod.address = await _wait_ready(pod)
        except BaseException:
            await self.stop(grace_s=2.0)
            raise
        log.debug("local pods started", addresses=self.addresses, devices=[p.device for p in self.pods])
        return self

    def terminate(self) -> None:
        """SIGTERM to every pod still running (a pod exits at once on it); `stop` or `stop_now`
        reaps them."""
        for pod in self.pods:
            if pod.process.returncode is None:
                try:
                    pod.process.terminate()
                except ProcessLookupError:
                    pass

    async def stop(self, grace_s: float = 5.0) -> None:
        """Terminate every pod still running, then kill the ones that do not exit in time."""
        import asyncio

        self.terminate()
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

    def stop_now(self, grace_s: float = 5.0) -> None:
        """`stop`, blocking: for the pods a command started, once its job is over (or never ran)."""
        _STARTED.discard(self)  # a signal's stop_all_started skips a stop under way, not waits inside it
        self.terminate()
        deadline = time.monotonic() + grace_s
        for pod in self.pods:
            if not pod.process.wait_blocking(max(0.0, deadline - time.monotonic())):
                pod.process.kill()
                pod.process.popen.wait()


_STARTED: weakref.WeakSet[LocalPods] = weakref.WeakSet()  # every LocalPods of this process, alive


def stop_all_started(grace_s: float = 2.0) -> None:
    """Stop every pod this process started and has not stopped yet: for a command leaving at once
    on a signal (scheduler/run_cli.py), whichever of its pods exist at that moment. A pod is on its
    LocalPods' list from its fork on (signals are held around the two, forked_pod.signals_held)."""
    for pods in list(_STARTED):
        pods.stop_now(grace_s)


def spawn_local_pods(devices: list[str], roots: list[Path], token: str, extra_args: list[str] = (),
                     log_level: str = "warning") -> LocalPods:
    """Start one pod per device without waiting for them (`LocalPods.ready` waits)."""
    env = blas.user_environment(options.environment())
    env[TOKEN_ENV] = token
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(blas.pod_threads(devices, env))
    pods = LocalPods(token)
    try:
        for device in devices:
            module = options.current().pod_module
            argv = [sys.executable, "-m", module, "--listen", "127.0.0.1:0", "--device", device,
                    "--log-level", log_level, *extra_args]
            for r in roots:
                argv += ["--storage-root", str(r)]
            fork = forked_pod.can_fork(device, module)
            with forked_pod.signals_held(fork):
                pods.pods.append(LocalPod(device, PodProcess(argv, env, root, fork)))
    except BaseException:
        pods.stop_now(grace_s=2.0)
        raise
    for pod in pods.pods:  # after every spawn: a thread running keeps the next pod from a fork
        pod.process.start_reading()
    return pods


def spawn_for(count: int | None, roots: list[Path], heartbeat_interval: float, heartbeat_timeout: float,
              log_level: str) -> LocalPods:
    """The local pods of a job run without --pods: `count` of them (default: one per visible GPU,
    else two CPU pods), heartbeating at the job's interval, started without waiting for them."""
    extra = ["--heartbeat-interval", str(heartbeat_interval), "--scheduler-timeout", str(heartbeat_timeout)]
    return spawn_local_pods(choose_devices(count, visible_gpus()), roots, new_token(), extra, log_level)


async def start_local_pods(devices: list[str], roots: list[Path], token: str, extra_args: list[str] = (),
                           log_level: str = "warning") -> LocalPods:
    return await spawn_local_pods(devices, roots, token, extra_args, log_level).ready()


async def _wait_ready(pod: LocalPod) -> str:
    import asyncio

    deadline = time.monotonic() + START_TIMEOUT_S
    while not pod.process.said.is_set():
        if time.monotonic() > deadline:
            raise UserError(f"local pod (device {pod.device}) did not start listening within "
                            f"{START_TIMEOUT_S:g} s")
        await asyncio.sleep(0.002)
    if pod.process.address is None:
        code = await pod.process.wait()
        raise UserError(f"local pod (device {pod.device}) exited with code {code} before listening; "
                        "its error is above")
    return pod.process.address
