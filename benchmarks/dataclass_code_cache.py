"""The dataclass code cache (common/dataclass_code_cache.py): a cold cache against a warm one.

Rounds alternate cold (the cache's folder emptied first: every dataclass method compiled, then
written) and warm (read from the files), so that both see the same machine load; reported per
measure, the medians and the median of the pairs' differences (warm less cold):

- `command`: `phobos-sched JOB --local-pods 1 --trace T` on the case's files: `wall` to exit,
  `cpu` (user + sys of the command and of the CPU pod it forks, from the rusage of reaped
  children), and the trace's `cli` and `pods` phases;
- `pod`: a CPU pod forked as the command forks it (local_pods.spawn_local_pods from a process
  with the cache installed and nothing heavy loaded): `listen` from the fork to its
  PHOBOS_POD_LISTENING line, `pod_cpu` the pod's own CPU by then (/proc).

Each process runs without PYTHONDONTWRITEBYTECODE, so that the modules' own bytecode comes from
__pycache__ as in an installed package. Run it under the lock the project's timings share:

    flock /tmp/s9/bench.lock env -u PYTHONDONTWRITEBYTECODE PYTHONPATH=. .venv/bin/python \\
        benchmarks/dataclass_code_cache.py --case /tmp/s9/dccache9-case --job job.capnp --pairs 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.pod_job_ab import paired  # noqa: E402

POD_PROBE = """
import json, os, sys, time
from pathlib import Path
from common import dataclass_code_cache
dataclass_code_cache.install()  # as the command's entry point does
from scheduler.pods import local_pods
started = time.perf_counter()
pods = local_pods.spawn_local_pods(["cpu"], [Path(sys.argv[1])], local_pods.new_token())
pod = pods.pods[0].process
pod.said.wait(60)
listen = time.perf_counter() - started
with open(f"/proc/{pod.pid}/stat") as f:
    fields = f.read().rpartition(")")[2].split()
cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
pods.stop_now()
print(json.dumps({"listen": listen, "pod_cpu": cpu, "forked": pod.popen.__class__.__name__ == "ForkedChild"}))
"""


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    env["PHOBOS_CACHE_DIR"] = str(cache)
    return env


def command_round(case: Path, job: str, cache: Path) -> dict[str, float]:
    trace = case / "dccache-bench-trace.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scheduler.main", job, "--local-pods", "1", "--trace", str(trace)],
                   cwd=case, env=_env(cache), check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    phases = json.loads(trace.read_text())["phases"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "cli": phases["cli"], "pods": phases["pods"]}


def pod_round(case: Path, cache: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", POD_PROBE, str(case)], cwd=ROOT, env=_env(cache), check=True,
                          capture_output=True, text=True)
    result = json.loads(done.stdout.splitlines()[-1])
    if not result.pop("forked"):
        raise SystemExit("the probe's pod was not forked: the measure would not be the command's pod")
    return result


def summary(rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Per measure, the cold and warm medians, and the pairs' differences (warm less cold, as
    pod_job_ab.py pairs two versions)."""
    diffs = paired({"cold": rows["cold"], "warm": rows["warm"]})
    return {measure: {"cold": statistics.median(r[measure] for r in rows["cold"]),
                      "warm": statistics.median(r[measure] for r in rows["warm"]), **diffs[measure]}
            for measure in rows["warm"][0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", required=True, type=Path, help="folder holding the job file and its inputs")
    p.add_argument("--job", default="job.capnp", help="the job file, in --case (default job.capnp)")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--only", choices=("command", "pod"), help="one measure, not both")
    p.add_argument("--out", type=Path, help="write the rounds and the summary as JSON here")
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="dccache-bench-"))
    warm_cache, cold_cache = scratch / "warm", scratch / "cold"
    try:
        case = args.case.resolve()
        for _ in range(2):  # the warm folder filled: the command's files, and its pod's
            command_round(case, args.job, warm_cache)
        result = {}
        for measure in ("command", "pod"):
            if args.only not in (None, measure):
                continue
            rows: dict[str, list[dict]] = {"cold": [], "warm": []}
            for _ in range(args.pairs):
                for kind, cache in (("cold", cold_cache), ("warm", warm_cache)):
                    shutil.rmtree(cold_cache, ignore_errors=True)
                    if measure == "command":
                        rows[kind].append(command_round(case, args.job, cache))
                    else:
                        rows[kind].append(pod_round(case, cache))
            result[measure] = {"rounds": rows, "summary": summary(rows)}
            for name, s in result[measure]["summary"].items():
                print(f"{measure:8} {name:8} cold {s['cold'] * 1000:7.1f} ms  "
                      f"warm {s['warm'] * 1000:7.1f} ms  paired {s['median_diff'] * 1000:+7.1f} ms  "
                      f"(warm less in {s['second_faster']})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps({"argv": sys.argv, **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
