"""`srun [-N NODES] -n TASKS phobos-sched slurm JOB [run flags]`: one pod per Slurm task, and the
scheduler in task 0, which finds every pod from Slurm's environment (scheduler/pods/slurm.py).

Each task starts its pod as a child process (in the task's own process group, so that Slurm's
signals reach it), on the port the layout gives its local id, at the address its node's name
resolves to; the pod exits 1, naming that address, when no scheduler says hello within
--hello-timeout. Task 0 waits until every pod accepts a connection (naming the address it tried
when one does not), then runs the job as `phobos-sched JOB --pods ...` would, and stops its own
pod; the others exit when the scheduler's connections close. docs/slurm.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import blas
from common import options as env_options
from common.cli import user_path
from common.cluster_token import TOKEN_ENV, read_token
from common.errors import UserError
from scheduler.pods import slurm

POD_START_TIMEOUT_S = 60.0
POD_EXIT_GRACE_S = 10.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phobos-sched slurm",
        description="Run a job over one pod per Slurm task: `srun -n TASKS phobos-sched slurm JOB`. "
                    "Task 0 also runs the scheduler; the pods are found from Slurm's environment.",
        epilog="Every other flag is phobos-sched's (--expect, --report, --split, ...), for the scheduler "
               "in task 0. The token comes from --token-file (on a shared file system) or $PHOBOS_TOKEN, "
               "which srun passes on to every task. See docs/slurm.md.")
    p.add_argument("job", help="the job file (phobos-sched new-job)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="each pod's device: the CPU (reference interpreter) or the task's GPU (default cpu)")
    p.add_argument("--token-file", metavar="PATH", help=f"the cluster's token (default: ${TOKEN_ENV})")
    p.add_argument("--base-port", type=int, metavar="PORT",
                   help="pod i of a node listens on PORT + i (default: srun --resv-ports' ports, else "
                        "a block derived from the job and step ids)")
    p.add_argument("--bind", metavar="HOST",
                   help="the address pods listen on and are reached at (default: what the node's name "
                        "resolves to)")
    p.add_argument("--hello-timeout", type=float, default=120.0, metavar="S",
                   help="a pod exits when no scheduler said hello within S s; task 0 gives up on a pod "
                        "that accepts no connection within S s (default 120)")
    p.add_argument("--storage-root", action="append", metavar="DIR",
                   help="directory storage URIs must lie in, for the pods and the scheduler (repeatable; "
                        "default: the working directory and the job file's folder)")
    p.add_argument("--pod-log-level", default="warning", help="the pods' log level (default warning)")
    return p


def resolve(name: str) -> str:
    """The IPv4 (else IPv6) address of a node name: what pods bind to and the scheduler dials."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UserError(f"cannot resolve node name {name!r}: {err.strerror}; pass --bind HOST") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0]


def cuda_ordinal(env: dict[str, str], local_id: int) -> str:
    """The GPU of a task: Slurm's --gpus-per-task=1 leaves one visible device (0); otherwise the
    task's local id picks among the node's devices."""
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return "0" if len(visible) == 1 else str(local_id)


class PodChild:
    """This task's pod: started, its ready line awaited (as an event, with a timeout), stopped."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.address: str | None = None
        self.said = threading.Event()
        threading.Thread(target=self._read, name="slurm-pod-stdout", daemon=True).start()

    def _read(self) -> None:
        from scheduler.pods.local_pods import read_ready_line

        read_ready_line(self)

    def wait_listening(self, where: str) -> str:
        if not self.said.wait(POD_START_TIMEOUT_S):
            self.stop()
            raise UserError(f"the pod at {where} did not start listening within {POD_START_TIMEOUT_S:g} s")
        if self.address is None:
            code = self.popen.wait()
            raise UserError(f"the pod at {where} exited with code {code} before listening; "
                            "its error is above")
        return self.address

    def stop(self, grace_s: float = POD_EXIT_GRACE_S) -> int:
        if self.popen.poll() is None:
            try:
                return self.popen.wait(grace_s)  # it exits by itself once the scheduler's connection closes
            except subprocess.TimeoutExpired:
                self.popen.terminate()
        try:
            return self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


def pod_argv(layout: slurm.SlurmLayout, host: str, device: str, roots: list[Path], args) -> list[str]:
    argv = [sys.executable, "-m", "pod.main", "--listen", f"{host}:{layout.mine.port}", "--device", device,
            "--hello-timeout", str(args.hello_timeout), "--log-level", args.pod_log_level]
    for root in roots:
        argv += ["--storage-root", str(root)]
    return argv


def pod_environment(layout: slurm.SlurmLayout, token: str, device: str) -> dict[str, str]:
    from scheduler.pods.local_pods import repo_root

    env = blas.user_environment(env_options.environment())
    env[TOKEN_ENV] = token  # the environment, never argv (`ps` shows argv to every user)
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    tasks_here = layout.tasks_per_node[layout.nodes.index(layout.node)]
    env.update(blas.pod_threads([device] * tasks_here, env))
    return env


def wait_reachable(places: list[tuple[slurm.PodPlace, str]], timeout: float) -> None:
    """Until every pod accepts a TCP connection: the other tasks' pods start on their own time."""
    deadline = time.monotonic() + timeout
    for place, host in places:
        while True:
            try:
                socket.create_connection((host, place.port), timeout=2.0).close()
                break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise UserError(f"the pod of node {place.node}, local task {place.local_id}, accepted no "
                                    f"connection at {place.address(host)} within {timeout:g} s "
                                    f"(last: {err.strerror or err}); is its task running?") from None
                time.sleep(0.1)


def main(argv: list[str], run_job) -> int:
    """`run_job(argv)` is the scheduler's own command line (scheduler/cli.py passes its `main`:
    this module does not import it back)."""
    from scheduler.run_cli import storage_roots

    args, rest = build_parser().parse_known_args(argv)
    for flag in rest:
        if flag.split("=")[0] in ("--pods", "--local-pods"):
            raise UserError(f"phobos-sched slurm: {flag.split('=')[0]} is not for Slurm runs: the pods are "
                            "the tasks' own")
    if not args.hello_timeout > 0:
        raise UserError(f"--hello-timeout must be positive, got {args.hello_timeout}")
    layout = slurm.layout_from_env(env_options.environment(), args.base_port)
    token = read_token(args.token_file)
    if token is None:
        raise UserError(f"no token: pass --token-file PATH (on a file system every node sees) or set "
                        f"{TOKEN_ENV} before srun")
    job_path = user_path(args.job)
    roots = storage_roots(args.storage_root, job_path)
    device = "cpu" if args.device == "cpu" else cuda_ordinal(env_options.environment(), layout.local_id)
    host = args.bind or resolve(layout.node)
    me = f"task {layout.proc_id} (node {layout.node}, local task {layout.local_id})"
    pod = PodChild(pod_argv(layout, host, device, roots, args), pod_environment(layout, token, device))
    # scancel and srun's Ctrl-C send SIGTERM to the task: the pod goes with it
    signal.signal(signal.SIGTERM, lambda *_: (pod.popen.terminate(), sys.exit(143)))
    address = pod.wait_listening(f"{host}:{layout.mine.port} ({me})")
    print(f"phobos-sched slurm: {me}: pod listening at {address}", file=sys.stderr, flush=True)
    if not layout.runs_scheduler:
        return pod.popen.wait()
    try:
        places = [(place, args.bind or resolve(place.node)) for place in layout.pods]
        wait_reachable(places, args.hello_timeout)
        pods = ",".join(place.address(h) for place, h in places)
        token_flags = ["--token-file", args.token_file] if args.token_file else []
        root_flags = [flag for r in roots for flag in ("--storage-root", str(r))]
        return run_job([str(job_path), "--pods", pods, *token_flags, *root_flags, *rest])
    finally:
        pod.stop()
