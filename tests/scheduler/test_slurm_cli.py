"""`phobos-sched slurm` and `phobos-pod --hello-timeout` as real processes on loopback, with a Slurm
environment made by hand (the real Slurm run is tools/slurm_split_k.sh, which .ci/run starts)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

from common.paths import repo_file

TOKEN = "a-token-for-the-slurm-tests-only-0123456789"
JOB = str(repo_file("examples/jobs/matmul.capnp"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(repo_file(".")), PHOBOS_TOKEN=TOKEN, **extra)
    return env


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(repo_file(".")))


def _two_free_ports() -> int:
    """A port P with P + 1 free as well (both bound, then released)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError("no two consecutive free ports")


def test_a_pod_no_scheduler_greets_exits_naming_its_address():
    done = _run(["-m", "pod.main", "--listen", "127.0.0.1:0", "--hello-timeout", "0.5"], _env())
    assert done.returncode == 1
    port = re.search(r"PHOBOS_POD_LISTENING 127\.0\.0\.1:(\d+)", done.stdout).group(1)
    assert (f"phobos-pod: error: no scheduler said hello to this pod at 127.0.0.1:{port} within 0.5 s"
            in done.stderr)


def test_task_0_names_the_address_of_a_pod_it_cannot_reach():
    base = _two_free_ports()
    env = _env(SLURM_STEP_NODELIST="localhost", SLURM_STEP_TASKS_PER_NODE="2", SLURM_JOB_ID="5",
               SLURM_STEP_ID="0", SLURMD_NODENAME="localhost", SLURM_LOCALID="0", SLURM_PROCID="0")
    # task 1 never starts: its pod's address accepts nothing
    done = _run(["-m", "scheduler.cli", "slurm", JOB, "--base-port", str(base), "--hello-timeout", "1"], env)
    assert done.returncode == 2, done.stderr
    assert f"task 0 (node localhost, local task 0): pod listening at 127.0.0.1:{base}" in done.stderr
    assert (f"error: the pod of node localhost, local task 1, accepted no connection at 127.0.0.1:{base + 1} "
            "within 1 s") in done.stderr


def test_outside_slurm_and_with_pods_it_is_refused_in_one_line():
    done = _run(["-m", "scheduler.cli", "slurm", JOB], _env())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: not inside a Slurm job step: $SLURM_STEP_NODELIST is not set")
    done = _run(["-m", "scheduler.cli", "slurm", JOB, "--pods", "127.0.0.1:9"], _env())
    assert done.returncode == 2 and "--pods is not for Slurm runs" in done.stderr
    assert "Traceback" not in done.stderr
