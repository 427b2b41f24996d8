"""Real runs for the report's tests: the scheduler's command line on CPU pods, traces written by it.

`run_example` writes a job for one of examples/jobs/*.phk with random inputs, starts CPU pods
(`python -m pod.main`, the //pod program), runs
`python -m scheduler.cli JOB --pods ... --trace T.json`, and, with `kill_node`, kills that pod
with SIGKILL once it has run part of its work, so the scheduler declares it lost and re-plans.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
JOB_KERNELS = REPO / "examples" / "jobs"
POD_MODULE = os.environ.get("PHOBOS_POD_MODULE", "pod.main")


@dataclass(frozen=True)
class ExampleJob:
    kernel: str
    dims: dict[str, int]
    scalars: dict[str, float]
    inputs: dict[str, tuple[int, ...]]  # tensor -> shape, random inputs
    outputs: dict[str, tuple[int, ...]]


EXAMPLES = {
    "add": ExampleJob("add", {"N": 4096}, {}, {"a": (4096,), "b": (4096,)}, {"c": (4096,)}),
    "matmul": ExampleJob("matmul", {"M": 512, "N": 512, "K": 512}, {"alpha": 1.0, "beta": 0.5},
                         {"A": (512, 512), "B": (512, 512)}, {"C": (512, 512)}),
    # Long enough (64 units of 9 launches) that a pod can be killed part-way.
    "matmul_1024": ExampleJob("matmul", {"M": 1024, "N": 1024, "K": 1024}, {"alpha": 1.0, "beta": 0.5},
                              {"A": (1024, 1024), "B": (1024, 1024)}, {"C": (1024, 1024)}),
    "flash_attention": ExampleJob("flash_attention", {"Nq": 512, "Nk": 512, "D": 64}, {"scale": 0.125},
                                  {"Q": (512, 64), "K": (512, 64), "V": (512, 64)}, {"O": (512, 64)}),
}


def _env(token: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PHOBOS_TOKEN"] = token
    return env


def write_job(folder: Path, example: ExampleJob) -> Path:
    from scheduler.jobs.jobfile import build_job
    from scheduler.jobs.jobfile import write_job as write_job_file

    rng = np.random.default_rng(11)
    for name, shape in example.inputs.items():
        np.save(folder / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
    for name, shape in example.outputs.items():
        np.save(folder / f"{name}.npy", np.zeros(shape, np.float32))
    tensors = {t: f"file:{t}.npy" for t in (*example.inputs, *example.outputs)}
    job = build_job(JOB_KERNELS / f"{example.kernel}.phk", None, example.dims, example.scalars, tensors)
    path = folder / "job.capnp"
    write_job_file(job, path)
    return path


def start_pods(count: int, folder: Path, env: dict[str, str]) -> tuple[list[subprocess.Popen], list[str]]:
    pods, addresses = [], []
    for _ in range(count):
        pods.append(subprocess.Popen(
            [sys.executable, "-m", POD_MODULE, "--listen", "127.0.0.1:0", "--device", "cpu",
             "--storage-root", str(folder), "--heartbeat-interval", "0.1", "--scheduler-timeout", "5"],
            env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True))
    for pod in pods:
        line = pod.stdout.readline().strip()
        if not line.startswith("PHOBOS_POD_LISTENING "):
            raise RuntimeError(f"pod did not start (said {line!r})")
        addresses.append(line.split()[1])
    return pods, addresses


def run_example(folder: Path, name: str, pods: int = 2, kill_node: int | None = None,
                kill_busy_s: float = 0.2, timeout: float = 120) -> dict:
    """Run example `name` on `pods` CPU pods and return the trace the scheduler wrote."""
    job = write_job(folder, EXAMPLES[name])
    token = secrets.token_hex(16)
    env = _env(token)
    processes, addresses = start_pods(pods, folder, env)
    trace_path = folder / f"{name}.trace.json"
    try:
        cmd = [sys.executable, "-m", "scheduler.cli", str(job), "--pods", ",".join(addresses),
               "--storage-root", str(folder), "--heartbeat-timeout", "1.0", "--trace", str(trace_path)]
        scheduler = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        if kill_node is not None:
            _kill_when_busy(processes[kill_node], kill_busy_s, scheduler, timeout)
        out, err = scheduler.communicate(timeout=timeout)
        if scheduler.returncode != 0:
            raise RuntimeError(f"scheduler exited {scheduler.returncode}:\n{out}\n{err}")
    finally:
        for pod in processes:
            if pod.poll() is None:
                pod.send_signal(signal.SIGTERM)
        for pod in processes:
            try:
                pod.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pod.kill()
    return json.loads(trace_path.read_text())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _kill_when_busy(pod: subprocess.Popen, busy_s: float, scheduler: subprocess.Popen,
                    timeout: float) -> None:
    """SIGKILL `pod` once it has spent `busy_s` CPU seconds on the job.

    An idle pod uses next to no CPU, so its CPU time says how far into its work it is: killing it
    part-way catches it with some units stored and some not, the case re-planning is for.
    """
    base = _cpu_seconds(pod.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and scheduler.poll() is None:
        if _cpu_seconds(pod.pid) - base >= busy_s:
            pod.send_signal(signal.SIGKILL)
            return
        time.sleep(0.005)
    if scheduler.poll() is None:
        raise RuntimeError(f"the pod to kill did not spend {busy_s} s of CPU on the job in {timeout} s")
    out, err = scheduler.communicate()
    raise RuntimeError(f"the job ended (exit {scheduler.returncode}) before the pod to kill got busy:\n"
                       f"{out}\n{err}")
