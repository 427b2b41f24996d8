"""The pod's side of a job, two versions of the code against each other on the same files.

One running pod (`--keep-serving`) per version, each started from its own checkout; the same job
(script_vs_job.py's case) is run against them in turn, round after round, so that both see the
same machine load, by one phobos-sched (the first version's). Reported per version, medians over
the rounds (the first round of each is not counted: caches, imports):

- `span`: the first instruction's start to the last store's end, from the trace's events: the
  pod's run of the plan, with no start-up or exit in it;
- `run` (the plan's submission to the last event), `submit` (to the first instruction), and the
  pod-side sums `read`, `compute`, `write` from the trace's `phases`;
- `command`: the scheduler's command to exit (it does not start the pod).

With `--local`, each version's whole command instead, from its own checkout, starting its own pod
(`phobos-sched JOB --local-pods 1`): `command` to exit, the phases `cli`, `pods`, `submit`, `run`,
`commit`, and `exit` (the commit's end to the process's exit), with `span` as above. `paired`: per
measure, the median of the second version's round less the first's, and how many rounds it won.
`--pause S` idles S seconds before every job (a command typed after a pause, not back to back).

A version is a checkout (`NAME=PATH`) or a git revision of this repository (`NAME=@REV`, taken
out with `git archive` into a temporary folder). Run (the pod's job before and after a change):

    PYTHONPATH=. .venv/bin/python benchmarks/pod_job_ab.py --rounds 20 before=@6078f32 after=. \
        --out benchmarks/results/cpu-amd-epyc-2core/pod-job-ab-add-2026-12-01.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.script_vs_job import compile_bytecode, make_case  # noqa: E402


def checkout(spec: str, scratch: Path) -> Path:
    """The folder of a version: PATH as it is, or @REV archived under `scratch`; either way its
    bytecode compiled (as an installed package has it)."""
    if not spec.startswith("@"):
        folder = Path(spec).resolve()
        compile_bytecode(folder)
        return folder
    folder = scratch / spec[1:]
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec[1:]], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    compile_bytecode(folder)
    return folder


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def start_pod(tree: Path, folder: Path, token: str) -> tuple[subprocess.Popen, str]:
    env = _env(tree) | {"PHOBOS_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
                             "--storage-root", str(folder), "--keep-serving", "--log-level", "warning"],
                            cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("PHOBOS_POD_LISTENING "):
            return proc, line.split()[1]
    raise SystemExit(f"the pod of {tree} did not start")


def one_job(scheduler: Path, job: Path, address: str | None, folder: Path) -> dict[str, float]:
    """One run of the job by `scheduler`'s command: against the pod at `address`, or (None) on a
    local pod of its own."""
    trace = folder / "trace.json"
    where = ["--pods", address, "--token-file", str(folder / "token")] if address else ["--local-pods", "1"]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scheduler.main", str(job), *where, "--trace", str(trace)],
                   cwd=folder, env=_env(scheduler), check=True, capture_output=True)
    command = time.perf_counter() - start
    data = json.loads(trace.read_text())
    phases, events = data["phases"], data["events"]
    first = min(e["start"] for e in events if e["kind"] in ("allocate", "load", "compute", "store"))
    last = max(e["end"] for e in events if e["kind"] == "store")
    row = {"span": last - first, "command": command}
    kept = ("cli", "pods", "submit", "run", "commit") if address is None else ("run", "submit")
    row.update({name: phases[name] for name in (*kept, "read", "compute", "write")})
    if address is None:
        row["exit"] = command - phases["to_commit"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("versions", nargs=2, metavar="NAME=PATH|NAME=@REV")
    p.add_argument("--n", type=int, default=1 << 25)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--local", action="store_true",
                   help="each version's whole command on a local pod of its own, not a running pod")
    p.add_argument("--pause", type=float, default=0.0, metavar="S",
                   help="seconds idle before each job: on a VM that hands memory idle for ~2 s back to "
                        "its host, what a command run after a pause pays for fresh memory")
    p.add_argument("--cluster", action="append", metavar="NAME=V",
                   help="a --cluster value for the job (as script_vs_job.py), e.g. BLOCK=1048576")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="phobos-pod-job-ab-") as tmp:
        folder, scratch = Path(tmp) / "job", Path(tmp) / "trees"
        folder.mkdir()
        trees = {name: checkout(spec, scratch) for name, spec in (v.split("=", 1) for v in args.versions)}
        job = make_case("add", "cpu", args.n, folder, args.cluster)[0]
        token = "bench-" + os.urandom(8).hex()
        (folder / "token").write_text(token + "\n")
        pods = {} if args.local else {name: start_pod(tree, folder, token) for name, tree in trees.items()}
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        try:
            for round_ in range(args.rounds + 1):
                for name, tree in trees.items():
                    time.sleep(args.pause)
                    if args.local:  # the version's own command and pod
                        row = one_job(tree, job, None, folder)
                    else:  # the first version's command against this version's pod
                        row = one_job(next(iter(trees.values())), job, pods[name][1], folder)
                    if round_:
                        rows[name].append(row)
        finally:
            for proc, _ in pods.values():
                proc.terminate()
                proc.wait()
    medians = {name: {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
               for name, rs in rows.items()}
    result = {"median_s": medians, "paired": paired(rows), "rounds": rows, "n": args.n,
              "load_average_1min": os.getloadavg()[0],
              "command": " ".join(["benchmarks/pod_job_ab.py", *(argv or sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps({"median_s": medians, "paired": result["paired"]}, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def paired(rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Per measure, the second version's round minus the first's in the same round: the median
    difference and in how many rounds the second was faster (the load moves both alike)."""
    first, second = rows.values()
    out = {}
    for key in first[0]:
        diffs = [b[key] - a[key] for a, b in zip(first, second, strict=True)]
        out[key] = {"median_diff": round(statistics.median(diffs), 4),
                    "second_faster": f"{sum(d < 0 for d in diffs)}/{len(diffs)}"}
    return out


if __name__ == "__main__":
    sys.exit(main())
