"""Hostile-peer soak: strangers against a pod, and non-pod addresses against the scheduler.

    PYTHONPATH=. .venv/bin/python tools/soak_hostile.py --connections 20000   # memory figure
    PYTHONPATH=. .venv/bin/python tools/soak_hostile.py --minutes 3           # soak

--connections N: one CPU pod on uvloop takes N stranger connections (garbage, a bare frame
header, an HTTP request, closed or reset at once: tests/faults/strangers.py), then N/100
wrong-token logins in waves of 50 (below the pod's cap of connections not logged in); prints its
resident memory before (after a 300-connection warm-up) and after, checks that it still runs a
job, and exits 1 when it died or grew more than 10 MB.

--minutes M: rounds until the time is up, against one pod (--keep-serving, so it outlives each
job's scheduler); each round runs the scheduler (a real process, on
uvloop) against every kind of non-pod address (tests/faults/strangers.py HostileServer: exit 2
with one line expected), floods the pod with 500 strangers and 5 wrong logins, and runs a job
through it (exit 0 and the right output expected). Prints the counts; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faults.strangers import SERVER_KINDS, HostileServer, flood, rss_mb  # noqa: E402
from tests.job_files import make_job  # noqa: E402

TOKEN = "soak-hostile-token-0123456789abcdef"


def _env() -> dict[str, str]:
    env = dict(os.environ, PHOBOS_TOKEN=TOKEN)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_pod(folder: Path) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
            "--storage-root", str(folder), "--log-level", "warning", "--keep-serving"]
    with open(folder / "pod.log", "w") as log:
        process = subprocess.Popen(argv, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
    return process, process.stdout.readline().split()[1]


def add_job(folder: Path) -> Path:
    np.save(folder / "a.npy", np.arange(1024, dtype=np.float32))
    np.save(folder / "b.npy", np.ones(1024, np.float32))
    return make_job(folder, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})


def scheduler(folder: Path, job: Path, address: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--pods", address,
                           "--storage-root", str(folder)],
                          env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300)


def job_problem(folder: Path, address: str) -> str:
    (folder / "c.npy").unlink(missing_ok=True)
    done = scheduler(folder, add_job(folder), address)
    if done.returncode != 0:
        return f"job through the pod: exit {done.returncode}: {done.stderr[-300:]}"
    if not np.array_equal(np.load(folder / "c.npy"), np.arange(1024, dtype=np.float32) + 1):
        return "job through the pod: wrong output"
    return ""


def wrong_logins(address: str, count: int) -> list[str]:
    """The refusals of `count` concurrent logins with wrong tokens."""
    import capnp

    from schemas import capnp_io, rpc_streams
    from schemas.remote_errors import remote_reason

    async def one(i: int) -> str:
        host, port = address.rsplit(":", 1)
        client = capnp.TwoPartyClient(await rpc_streams.connect(host, int(port)))
        gate = client.bootstrap().cast_as(capnp_io.rpc().Gate)
        try:
            return str((await asyncio.wait_for(gate.login(f"wrong-{i}-{'y' * 24}"), 60)).refusal)
        except Exception as err:
            return f"exception: {remote_reason(err)}"

    async def all_of_them() -> list[str]:
        return list(await asyncio.gather(*(one(i) for i in range(count))))

    return rpc_streams.run(all_of_them())


def settle(pid: int, fds: int, timeout: float = 60) -> None:
    """Wait until the pod holds no more descriptors than `fds` (every stranger closed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(os.listdir(f"/proc/{pid}/fd")) > fds:
        time.sleep(0.1)


def measure(connections: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pod, address = start_pod(folder)
        try:
            flood(address, 300)
            fds = len(os.listdir(f"/proc/{pod.pid}/fd"))
            before = rss_mb(pod.pid)
            started = time.monotonic()
            flood(address, connections, start=300)
            refusals = Counter()
            for _ in range(max(1, connections // 5000)):  # waves below --max-pending-logins
                refusals.update(wrong_logins(address, 50))
            settle(pod.pid, fds)
            after = rss_mb(pod.pid)
            took = time.monotonic() - started
            problem = "" if pod.poll() is None else f"the pod died (exit {pod.returncode})"
            problem = problem or job_problem(folder, address)
        finally:
            pod.kill()
            pod.wait()
    grown = after - before
    print(f"{connections} stranger connections + {sum(refusals.values())} wrong logins in {took:.1f} s: "
          f"pod RSS {before:.1f} MB -> {after:.1f} MB ({grown:+.1f} MB); refusals {dict(refusals)}")
    if problem or grown > 10:
        print("FAILED:", problem or f"grew {grown:.1f} MB")
        return 1
    return 0


def soak(minutes: float) -> int:
    outcomes: Counter = Counter()
    failures: list[str] = []
    deadline = time.monotonic() + minutes * 60
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        job = add_job(folder)
        pod, address = start_pod(folder)
        try:
            while time.monotonic() < deadline:
                for kind in SERVER_KINDS:
                    with HostileServer(kind) as hostile:
                        done = scheduler(folder, job, hostile.address)
                    lines = [line for line in done.stderr.splitlines() if line.strip()]
                    ok = done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr
                    outcomes[f"scheduler vs {kind}"] += 1
                    if not ok:
                        failures.append(f"scheduler vs {kind}: exit {done.returncode}: {done.stderr[-300:]}")
                flood(address, 500, start=outcomes["floods"] * 500)
                outcomes["floods"] += 1
                refusals = wrong_logins(address, 5)
                outcomes["wrong logins"] += len(refusals)
                if set(refusals) != {"wrongToken"}:
                    failures.append(f"wrong logins answered {refusals}")
                problem = job_problem(folder, address) if pod.poll() is None else "the pod died"
                outcomes["jobs"] += 1
                if problem:
                    failures.append(problem)
                    break
        finally:
            pod.kill()
            pod.wait()
    print(f"{minutes:g} min: " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())))
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, help="measure the pod's memory over this many strangers")
    parser.add_argument("--minutes", type=float, help="soak for this long")
    args = parser.parse_args()
    if args.connections:
        return measure(args.connections)
    return soak(args.minutes or 3)


if __name__ == "__main__":
    sys.exit(main())
