"""A phobos job against the hand-written script a user would write instead, on the same files.

Both sides run as fresh processes from the command line, alternating, in one run, so that both see
the same machine load:

- script: `python -c "a = np.load(A); b = np.load(B); np.save(C, a + b)"` (numpy on the CPU, or
  cupy with `--device gpu`: load, upload, add or matmul, download, save);
- phobos: `python -m scheduler.main JOB --local-pods 1 --trace T` (starts its own pod), and with
  `--running-pods` also the same job against one pod started once before the rounds
  (`--pods HOST:PORT`), which is the documented way to run on a cluster.

Reported per side: median command-to-exit seconds and the ratio phobos / script, and from each
phobos trace the `phases` breakdown (start-up, compile, plan, staging, read, host-to-device,
compute, device-to-host, write, commit; `exit`: commit done to the command's exit), and every
round's instructions as a timeline (`timelines`). Outputs are checked against the script's before
timing. Before the rounds the checkout's modules are compiled to bytecode, as installing a package
does (pip compiles what it installs): where PYTHONDONTWRITEBYTECODE is set, as on this project's
machines, every phobos process would otherwise compile each of its modules from source, every
time, while the script's numpy has its bytecode from its install.

With `--cold` every timed command starts with the tensor files out of the page cache (fsync,
then posix_fadvise DONTNEED; the programs' own files stay cached, as on a machine in use), and
the run also measures
what the job cannot beat: the inputs' cold read bandwidth (best of two) and, on a GPU, cuBLAS's
time for the product; `bound_s` = max(input bytes / read bandwidth, cuBLAS), and the job's wall
time (plan to commit, from its trace) and command-to-exit are reported against it.

Run (CPU, 2^25 f32 add):
    PYTHONPATH=. .venv/bin/python benchmarks/script_vs_job.py --case add --n 33554432 --rounds 5 \
        --out benchmarks/results/cpu-amd-epyc-2core/script-vs-job-add.json
GPU, cold files, only the running pod against the script:
    python3 benchmarks/script_vs_job.py --device gpu --case matmul --n 8192 --running-pods \
        --no-local --cold --out $OUT/script-vs-job-gpu-matmul-cold.json
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.cluster_harness import drop_cache, read_bandwidth, read_with_durable_write_s  # noqa: E402

SOURCES = ("common", "compiler", "pod", "scheduler", "schemas", "phobos")  # phobos's own packages


def compile_bytecode(tree: Path) -> None:
    """Compile a checkout's packages to bytecode (its __pycache__ folders, or PYTHONPYCACHEPREFIX's
    tree when set, where the timed processes look too), whatever PYTHONDONTWRITEBYTECODE says."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    packages = [name for name in SOURCES if (tree / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], cwd=tree, env=env, check=True)

KERNELS = {  # (case, device) -> kernel, --cluster values (n below 2^24: the CPU kernel's 2^20 block)
    ("add", "cpu"): ("benchmarks/kernels/cluster_add.phk", ["BLOCK=4194304"]),
    ("add", "gpu"): ("benchmarks/kernels/cluster_add_gpu.phk", ["BLOCK=16777216"]),
    ("add", "gpu-small"): ("benchmarks/kernels/cluster_add.phk", ["BLOCK=1048576"]),
    # One pod, disk-bound: full-width output bands, so a store is one contiguous run of the file
    # and what is left after the last read is one 64 MiB band (with 4096 x 4096 tiles the last two
    # units share A's last band and store 128 MiB, in 16 KiB rows, after it: docs/performance.md).
    ("matmul", "gpu"): ("benchmarks/kernels/cluster_matmul_gpu.phk",
                        ["TILE_M=2048", "TILE_N=8192", "TILE_K=8192"]),
}
ADD_SCRIPT = """
import numpy as np, sys
a = np.load(sys.argv[1]); b = np.load(sys.argv[2]); np.save(sys.argv[3], a + b)
"""
ADD_SCRIPT_GPU = """
import numpy as np, cupy as cp, sys
a = cp.asarray(np.load(sys.argv[1])); b = cp.asarray(np.load(sys.argv[2]))
np.save(sys.argv[3], cp.asnumpy(a + b))
"""
CUBLAS_SECONDS = """
import sys, cupy as cp
n = int(sys.argv[1])
a, b = (cp.random.standard_normal((n, n), dtype=cp.float32) for _ in range(2))
cp.matmul(a, b)
start, end, times = cp.cuda.Event(), cp.cuda.Event(), []
for _ in range(5):
    start.record(); cp.matmul(a, b); end.record(); end.synchronize()
    times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
print(sorted(times)[2])
"""
MATMUL_SCRIPT_GPU = """
import numpy as np, cupy as cp, sys
a = cp.asarray(np.load(sys.argv[1])); b = cp.asarray(np.load(sys.argv[2]))
np.save(sys.argv[3], cp.asnumpy(a @ b))
"""


def make_case(case: str, device: str, n: int, folder: Path,
              cluster_values: list[str] | None = None) -> tuple[Path, list[Path], Path, str]:
    """Write the inputs and the job file; returns (job, inputs, phobos output, script source).
    `cluster_values` (NAME=V) replace the values KERNELS pins for those names; the others stay."""
    rng = np.random.default_rng(0)
    small = device == "gpu" and case == "add" and n < 1 << 24
    kernel, pinned = KERNELS[(case, "gpu-small" if small else device)]
    values = dict(v.split("=", 1) for v in pinned + list(cluster_values or ()))
    cluster = [f"{name}={value}" for name, value in values.items()]
    if case == "add":
        shape_a = shape_b = (n,)
        dims = [f"N={n}"]
        tensors = ["a=file:a.npy", "b=file:b.npy", "c=file:c.npy"]
        script = ADD_SCRIPT if device == "cpu" else ADD_SCRIPT_GPU
    else:
        shape_a = shape_b = (n, n)
        dims = [f"M={n}", f"N={n}", f"K={n}"]
        tensors = ["A=file:a.npy", "B=file:b.npy", "C=file:c.npy"]
        script = MATMUL_SCRIPT_GPU
        np.save(folder / "c.npy", np.zeros((n, n), np.float32))  # read for beta * C (beta = 0)
    np.save(folder / "a.npy", rng.standard_normal(shape_a, dtype=np.float32))
    np.save(folder / "b.npy", rng.standard_normal(shape_b, dtype=np.float32))
    job = folder / "job.capnp"
    cmd = [sys.executable, "-m", "scheduler.main", "new-job", str(ROOT / kernel), "-o", str(job)]
    for value in cluster:
        cmd += ["--cluster", value]
    for d in dims:
        cmd += ["--dim", d]
    for t in tensors:
        cmd += ["--tensor", t]
    if case == "matmul":
        cmd += ["--scalar", "alpha=1", "--scalar", "beta=0"]
    subprocess.run(cmd, check=True, cwd=ROOT, env=_env())
    return job, [folder / "a.npy", folder / "b.npy"], folder / "c.npy", script


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def start_pod(device: str, folder: Path, token: str) -> tuple[subprocess.Popen, str]:
    env = _env()
    env["PHOBOS_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device",
         "0" if device == "gpu" else "cpu", "--storage-root", str(folder), "--keep-serving",
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("PHOBOS_POD_LISTENING "):
            return proc, line.split()[1]
    raise SystemExit("the pod did not start")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=["add", "matmul"], default="add")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--n", type=int, default=1 << 25)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--running-pods", action="store_true", help="also time the job against a started pod")
    p.add_argument("--no-local", action="store_true", help="leave out the --local-pods 1 side")
    p.add_argument("--cold", action="store_true",
                   help="inputs out of the page cache before every command; measure the bound")
    p.add_argument("--cluster", action="append", metavar="NAME=V",
                   help="pin this @cluster value instead of the case's (repeat for each name; "
                        "the names not given keep the case's values)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--importtime", metavar="FILE",
                   help="after the rounds, run the last phobos side once more under python -X importtime "
                        "and write what it prints (every module's import time) to FILE")
    args = p.parse_args(argv)
    compile_bytecode(ROOT)
    with tempfile.TemporaryDirectory(prefix="phobos-script-vs-job-") as tmp:
        folder = Path(tmp)
        job, inputs, output, script = make_case(args.case, args.device, args.n, folder, args.cluster)
        script_cmd = [sys.executable, "-c", script, *map(str, inputs), str(folder / "c_script.npy")]
        trace = folder / "trace.json"
        local_cmd = [sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1",
                     "--trace", str(trace)]
        sides = {"script": script_cmd}
        if not args.no_local:
            sides["phobos --local-pods 1"] = local_cmd
        pod = None
        if args.running_pods:
            token = "bench-" + os.urandom(8).hex()
            pod, address = start_pod(args.device, folder, token)
            (folder / "token").write_text(token + "\n")
            sides["phobos --pods (running)"] = [
                sys.executable, "-m", "scheduler.main", str(job), "--pods", address,
                "--token-file", str(folder / "token"), "--trace", str(trace)]
        files = [folder / name for name in ("a.npy", "b.npy", "c.npy") if (folder / name).exists()]
        cold = (lambda: drop_cache(files)) if args.cold else None
        try:
            result = run_rounds(sides, folder, trace, output, args.rounds, cold)
            if args.importtime:
                cmd = list(sides.values())[-1]
                done = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=folder, env=_env(),
                                      capture_output=True, text=True, check=True)
                Path(args.importtime).write_text(done.stderr)
            if args.cold:
                result["bound"] = bound(files, output, args.case, args.device, args.n, result)
        finally:
            if pod is not None:
                pod.terminate()
                pod.wait()
    result.update(case=args.case, device=args.device, n=args.n, rounds=args.rounds,
                  command=" ".join(["benchmarks/script_vs_job.py", *(argv or sys.argv[1:])]),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


def run_rounds(sides: dict[str, list[str]], folder: Path, trace: Path, output: Path, rounds: int,
               cold=None) -> dict:
    for name, cmd in sides.items():  # one unmeasured round: caches warm, outputs checked
        timed(cmd, folder)
        if name != "script":
            expected = np.load(folder / "c_script.npy")
            tolerance = 1e-4 * max(1.0, float(np.abs(expected).max()))  # docs/runtime.md, --expect
            np.testing.assert_allclose(np.load(output), expected, rtol=1e-4, atol=tolerance)
    times: dict[str, list[float]] = {name: [] for name in sides}
    phases: dict[str, list[dict]] = {name: [] for name in sides if name != "script"}
    timelines: dict[str, list] = {}
    loads = []
    for _ in range(rounds):
        loads.append(os.getloadavg()[0])
        for name, cmd in sides.items():
            if cold is not None:
                cold()
            elapsed = timed(cmd, folder)
            times[name].append(elapsed)
            if name != "script":
                data = json.loads(trace.read_text())
                row = {"wall_s": data["summary"]["wall_s"], **data.get("phases", {})}
                row["bytes_loaded"] = sum(n["bytes_loaded"] for n in data["summary"]["nodes"])
                if "to_commit" in row:
                    row["exit"] = elapsed - row["to_commit"]
                phases[name].append(row)
                timelines.setdefault(name, []).append(timeline(data))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    ratios = {name: round(medians[name] / medians["script"], 3) for name in sides if name != "script"}
    phase_medians = {name: {key: round(statistics.median(p[key] for p in rows), 4) for key in rows[0]}
                     for name, rows in phases.items()}
    return {"seconds": times, "median_s": medians, "ratio_to_script": ratios,
            "phases_median_s": phase_medians, "load_average_1min": loads, "timelines": timelines}


def timeline(trace: dict) -> list:
    """One round's instructions as rows [start, end, kind, unit, id, MiB] (seconds from the job's
    start, which is before its compile; the wall time counts from there), then its end, in order:
    where the round's time went, and what ran after the last read or before the first."""
    rows = [[round(e["start"], 4), round(e["end"], 4), e["kind"], e.get("unit"), e["id"],
             round(e["bytes"] / 2**20, 1)]
            for e in trace["events"] if e["kind"] in ("load", "compute", "store", "fetch")]
    end = [round(trace["summary"]["wall_s"], 4), None, "end (commit done)", None, None, None]
    return sorted(rows, key=lambda row: (row[0], row[1], row[4])) + [end]  # unit may be None


def bound(files: list[Path], output: Path, case: str, device: str, n: int, result: dict) -> dict:
    """What the job cannot beat, measured now: its inputs at the cold read bandwidth, and on a
    GPU cuBLAS's product; the phobos sides' wall and command times against it."""
    read_bw = read_bandwidth(files, repeats=2, cold=True)
    nbytes = sum(f.stat().st_size for f in files if f.name != "c.npy" or case == "matmul")
    figures = {"read_bandwidth_Bps": read_bw, "input_bytes": nbytes, "read_s": nbytes / read_bw}
    if device == "gpu" and case == "matmul":
        done = subprocess.run([sys.executable, "-c", CUBLAS_SECONDS, str(n)], env=_env(), check=True,
                              capture_output=True, text=True)
        figures["cublas_s"] = float(done.stdout.split()[-1])
    figures["bound_s"] = max(figures["read_s"], figures.get("cublas_s", 0.0))
    # The bound counts only the reads; a job must also make its output durable on the same disk.
    out_bytes = output.stat().st_size
    figures["output_bytes"] = out_bytes
    figures["read_with_durable_write_s"] = read_with_durable_write_s(files, out_bytes, output.parent)
    figures["disk_floor_s"] = max(figures["read_with_durable_write_s"], figures.get("cublas_s", 0.0))
    for name, phases in result["phases_median_s"].items():
        figures[f"{name}: wall / bound"] = round(phases["wall_s"] / figures["bound_s"], 3)
        figures[f"{name}: wall / disk floor"] = round(phases["wall_s"] / figures["disk_floor_s"], 3)
        figures[f"{name}: command / bound"] = round(result["median_s"][name] / figures["bound_s"], 3)
    return figures


if __name__ == "__main__":
    sys.exit(main())
