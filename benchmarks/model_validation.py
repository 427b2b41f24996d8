"""The cluster tuner's model against measurement: matmul and flash attention at every @cluster
combination on 2 and 4 local CPU pods, predicted and measured side by side.

For each kernel and node count: start the pods, calibrate the model on them (probe jobs, a fresh
cache), rank every combination, then run every kept combination for real, REPS times each in
interleaved order (so a drift of the machine touches every combination alike), and take the
median wall time (the scheduler's job time: plan, submit, run, commit; pod start-up excluded).
The check: the model's first choice measures within 10% of the best measured combination.

    PYTHONPATH=. .venv/bin/python benchmarks/model_validation.py [--reps 3]
        [--nodes 2,4] [--kernels matmul,flash_attention] [--write-doc] [--json FILE]

--write-doc replaces the section "Cluster tuner: predicted vs measured" of docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common import blas  # noqa: E402
from common.atomic import write_atomically  # noqa: E402

SECTION = "## Cluster tuner: predicted vs measured"
TOLERANCE = 0.10  # the model's choice may measure at most 10% above the best measured


@dataclass(frozen=True)
class Case:
    name: str
    kernel: str  # path under the repo
    dims: dict
    scalars: dict
    shapes: dict  # tensor -> shape
    outputs: tuple  # tensors written


def _matmul(n: int) -> Case:
    return Case("matmul", "benchmarks/kernels/matmul_cpu.phk", {"M": n, "N": n, "K": n},
                {"alpha": 1.0, "beta": 0.5}, {"A": (n, n), "B": (n, n), "C": (n, n)}, ("C",))


def _flash_attention(n: int, d: int = 64) -> Case:
    return Case("flash_attention", "benchmarks/kernels/flash_attention_cpu.phk", {"Nq": n, "Nk": n, "D": d},
                {"scale": 0.125}, {"Q": (n, d), "K": (n, d), "V": (n, d), "O": (n, d)}, ("O",))


# Sized so that a job takes about a second on 2 CPU pods of a 2-core machine: long enough that a
# job's fixed costs (plan, submit, RPC, commit) and the machine's jitter are a small share of it.
CASES = {"matmul": _matmul(2048), "flash_attention": _flash_attention(8192)}


def make_job(case: Case, folder: Path) -> Path:
    from scheduler.jobs.jobfile import build_job, write_job

    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in case.shapes.items():
        path = folder / f"{case.name}-{name}.npy"
        np.save(path, rng.standard_normal(shape, dtype=np.float32))
        tensors[name] = path.as_uri()
    job = build_job(ROOT / case.kernel, case.name, dims=case.dims, scalars=case.scalars, tensors=tensors,
                    cluster_values={})
    job_path = folder / f"{case.name}.job"
    write_job(job, job_path)
    return job_path


async def validate(case: Case, nodes: int, reps: int, folder: Path, say) -> dict:
    from compiler.cluster.tree import NO_SPLIT
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import new_job_id, prepare, recompile
    from scheduler.running.run import PodSession, RunOptions, start_pods_for
    from scheduler.tuning import calibrate as cal
    from scheduler.tuning.tuner_cli import TuneOptions, base_figures, candidate_compiler, rank_job
    from scheduler.tuning.tuner_table import render_table

    job_path = make_job(case, folder)
    prepared = prepare(read_job(job_path), job_path, [folder])
    options = RunOptions(local_pods=nodes, storage_roots=(folder,))
    local = await start_pods_for(options)
    session = PodSession(local.addresses, local.token)
    try:
        await session.open()
        order = sorted(session.pods)
        infos = [session.infos[n] for n in order]
        base = base_figures(TuneOptions(autotune=True), len(order), [i.backend for i in infos],
                            [int(i.vram_bytes) for i in infos])
        first = rank_job(prepared, base, {})
        candidates = (*first.ranked, *first.dropped)
        figures = await cal.calibrate(session, prepared, options, order, candidates, base,
                                      candidate_compiler(prepared), say)
        ranking = rank_job(prepared, figures, {})
        say(render_table(ranking))
        kept = list(ranking.ranked)
        times: dict[str, list[float]] = {c.label(): [] for c in kept}
        for _ in range(reps):
            for c in sorted(kept, key=lambda c: c.order):
                job = dataclasses.replace(recompile(prepared, dict(c.values), split=c.split or NO_SPLIT),
                                          job_id=new_job_id())
                result = await session.run(job, options, order)
                if not result.ok:
                    raise RuntimeError(f"{case.name} at {c.label()} failed: {result.reason}")
                times[c.label()].append(result.wall_s)
        rows = []
        for rank, c in enumerate(kept, 1):
            runs = times[c.label()]
            rows.append({"combination": c.label(), "units": c.units, "predicted_rank": rank,
                         "predicted_s": c.prediction.total_s, "measured_s": statistics.median(runs),
                         "min_s": min(runs), "runs_s": runs})
        by_measured = sorted(rows, key=lambda r: r["measured_s"])
        for i, row in enumerate(by_measured, 1):
            row["measured_rank"] = i
        best = by_measured[0]["measured_s"]
        chosen = rows[0]["measured_s"]
        return {"kernel": case.name, "nodes": nodes, "dims": case.dims, "figures": figures.source,
                "figures_text": render_table(ranking).splitlines()[0], "rows": rows,
                "dropped": [{"combination": c.label(), "reason": c.dropped} for c in ranking.dropped],
                "chosen": rows[0]["combination"], "best_measured": by_measured[0]["combination"],
                "chosen_over_best": chosen / best - 1.0, "within_tolerance": chosen <= best * (1 + TOLERANCE)}
    finally:
        await session.close()
        await local.stop()


GUIDE = """\
`phobos-sched JOB --autotune` chooses the `@cluster` values (scheduler/tuning/tuner.py, tuner_cli.py):

1. every combination of the `@cluster` values (less those pinned with `--cluster`) is compiled by the
   cluster compiler and planned by the real planner over the nodes; a combination is **dropped**
   when the compiler rejects it (its reason is shown), when it has fewer super-tiles than nodes (a
   node would get none), or when a node's peak memory (the planner's) exceeds its memory;
2. the rest are **ranked** by a model of the busiest node, from its plan: compute = its launches'
   time (per leaf a line: launch cost + FLOPs / leaf FLOP/s); transfer = (bytes loaded + stored) /
   storage bandwidth + (bytes fetched + served) / link bandwidth + a fixed cost per load, store and
   fetch; node time = start (the first compute's inputs) + compute + the rest of the transfers, of
   which the `overlap` share hides under compute, + the last store + a fixed cost per instruction
   of its plan; job = a fixed per-job cost + the busiest node;
3. the table (combination, predicted time, busiest node, its compute and transfer, bytes moved,
   peak memory, then each dropped one and why) is printed and the first one runs.

Figures: `--nodes` (default: the pods connected; local pods follow it), `--vram` (default: the
smallest memory a pod reports), `--leaf-flops`, `--link-bw`, `--storage-bw`, `--launch-overhead`;
defaults for GPU pods 40e12 FLOP/s, 50e9 B/s, 2e9 B/s, 20 us; for CPU pods 5e9, 1e9, 2e9, 1 ms.
`--tune-only` prints the table and runs nothing. Nothing is measured unless `--calibrate`.

`--calibrate` measures the figures on the pods with probe jobs through the real runtime (the job
cut to its first 3 units per node, outputs to scratch files), after one unmeasured warm-up job: at
the combinations with the most and the fewest super-tiles, then at every other kept combination
whose leaves were not timed yet (so on a small job, calibration costs about as much as running
every combination once; on a large one, a few units per node and combination). Every probe runs
twice, in order and then in reverse, so that a drift in the machine's load touches every size
alike (in one run under a load average of 9, a single pass put every launch's time on its FLOPs
and ranked all flash attention combinations equal). All pods run every probe at once, so the
figures include what pods sharing a machine's cores cost each other. From the probes' trace
events: per leaf one line launch time = launch cost + FLOPs / rate through all probes' launches,
shared out by how many launches a pod runs at once; storage and link lines over loads, stores and
fetches (a fetch timed from when its peer had the tile); a line whose time falls with size
(scatter) is refit through the origin, never turned into an infinite rate; the share of transfer
time hidden under compute; the per-job cost (wall time outside the events, plus each leaf's
preparation on its first launch); and the cost per instruction: what those figures leave
unexplained of each node's span in the probes, over its instruction count (median, never below 0;
on CPU pods sharing cores it is dispatch, event reports and waits for the interpreter lock and a
core). Medians per size everywhere, since single events on a shared machine scatter by several
times. An earlier version also used the launch time measured per leaf shape (dims and tile
values); each shape is timed by one small probe, which scattered by more than the shapes differ
(same-FLOP shapes up to 2x apart) and made the tuner choose matmul combinations 21-30% slower than
the best; the model no longer uses them. The result is cached in
`$PHOBOS_CACHE_DIR/cluster-calibration.json` (default `~/.cache/phobos/`), keyed by the cluster
(each pod's host, backend and device, ports left out) and the kernel (source, dims, tile values);
a later `--calibrate` on the same cluster and kernel measures nothing.

`--tune-leaves` lets one GPU pod time every `@autotune` point of the leaves at the chosen
`@cluster` values (a 2-unit probe job per point on that pod); every node then runs the fastest
point's values (cached beside the calibration). It refuses CPU-only clusters.

Limits, as measured. The validation kernels (benchmarks/kernels/*_cpu.phk) run at 2048^3 (matmul)
and 8192 x 8192 x 64 (flash attention), so that a job takes 0.35-1.9 s (medians) on 2 or 4 CPU
pods of the 2-core machine; at the earlier 1024^3 / 2048 sizes a job took 0.1-0.4 s and the
run-to-run scatter was as large as the differences between combinations. The local pods run with
one BLAS thread per call (the script sets `OPENBLAS_NUM_THREADS=1`, `OMP_NUM_THREADS=1` and
`MKL_NUM_THREADS=1` unless already set): a CPU pod runs two launches at once and 2-4 pods share
the two cores, and OpenBLAS's own spinning threads on top made the same job scatter by 2x (matmul
1024^3 on 2 pods: 0.26-0.56 s with the default threads, 0.13-0.19 s with one). A plain
`phobos-sched --local-pods` run does not set them; that is the pods' configuration, not the
tuner's. The model's absolute predictions are off by 0.67x to 2.4x (measured / predicted). The
worst, in both recorded runs: on 4 pods the two matmul combinations with TILE_N=512 and TILE_K=256
measured 2.2-2.4x their prediction (1.3-1.9 s against 0.59-0.81 s), something those combinations
cost on 4 pods sharing 2 cores that the probes do not show; it is not diagnosed, and it only costs
ranks below the choice. What the model ranks right is which combinations cost more launches,
instructions, fetches and loads for the same FLOPs. The measurement runs on a machine shared with
other work, so single runs of one combination still scatter by up to 2.5x (fastest to slowest of
its 5) and the check is of medians of interleaved runs. With this model, two back-to-back runs
were recorded on 2026-11-29 (`--reps 5`; the table below is the second, its JSON in
benchmarks/results/model-validation-cpu-2core-2026-11-29.json, the first's beside it with
`-run1`): the first, at load average 8.1, passed 4 of 4 cases, each with the best measured
combination as the model's choice (1 min 49 s in all); the second, at load average 5.6, too (2 min
0 s). Before the last two changes (probes run twice; flash attention at 8192 instead of 4096), two
check runs at load averages 5-10 passed 3 of 4 each; both times flash attention on 2 pods missed:
once by +124% (a calibration that put every launch's time on its FLOPs ranked all four
combinations equal, and the tie went to the first, BR=128), once by +12% between two combinations
whose single runs overlapped (0.20-0.37 s against 0.23-0.43 s).
"""


def markdown(results: list[dict], reps: int, load: float | None) -> str:
    from scheduler.tuning.tuner import format_seconds as fmt

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    lines = [SECTION, "", GUIDE, "### Validation", "",
             "Written by `benchmarks/model_validation.py` (do not edit the tables by hand). Local CPU "
             f"pods (the reference interpreter, one BLAS thread per call) on one machine ({machine}), "
             f"{when}; the machine was "
             f"shared with other work ({_load_text(load)}), so single runs scatter. "
             "For each kernel and node count the model is calibrated on the pods (`--calibrate`, fresh "
             "cache), every @cluster combination is ranked, and every kept combination is run "
             f"{reps} times (interleaved); *measured* is the median job wall time (plan, submit, run, "
             "commit; pod start-up excluded), *min* the fastest run. The check: the model's first "
             "choice measures (median) within 10% of the best measured combination.", ""]
    for r in results:
        verdict = "yes" if r["within_tolerance"] else "**no**"
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines += [f"#### {r['kernel']} on {r['nodes']} CPU pods ({dims})", "",
                  f"Model figures: `{r['figures_text'].removeprefix('cluster tuner: ')}`", "",
                  "| combination | units | predicted | measured | min | predicted rank | measured rank |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for row in r["rows"]:
            lines.append(f"| {row['combination']} | {row['units']} | {fmt(row['predicted_s'])} | "
                         f"{fmt(row['measured_s'])} | {fmt(row['min_s'])} | {row['predicted_rank']} | "
                         f"{row['measured_rank']} |")
        for d in r["dropped"]:
            lines.append(f"| {d['combination']} | | dropped: {d['reason']} | | | | |")
        over = f"{100 * r['chosen_over_best']:+.1f}%"
        ratios = [row["measured_s"] / row["predicted_s"] for row in r["rows"]]
        fastest = min(row["min_s"] for row in r["rows"])
        by_min = f"{100 * (r['rows'][0]['min_s'] / fastest - 1):+.1f}%"
        lines += ["", f"Model's choice {r['chosen']}; best measured {r['best_measured']}; the choice "
                      f"measures {over} against the best: within 10%: {verdict} (by fastest runs instead of "
                      f"medians: {by_min}). Rank correlation "
                      f"(Spearman) of predicted and measured: {spearman(r['rows']):+.2f}; measured / "
                      f"predicted: median {statistics.median(ratios):.2f}, from {min(ratios):.2f} to "
                      f"{max(ratios):.2f}.", ""]
    passed = sum(r["within_tolerance"] for r in results)
    lines.append(f"In this run {passed} of {len(results)} cases pass the 10% check.")
    return "\n".join(lines)


def spearman(rows: list[dict]) -> float:
    """Rank correlation of the predicted and measured ranks (no ties: ranks are positions)."""
    n = len(rows)
    if n < 2:
        return 1.0
    d2 = sum((row["predicted_rank"] - row["measured_rank"]) ** 2 for row in rows)
    return 1 - 6 * d2 / (n * (n * n - 1))


def _load_text(load: float | None) -> str:
    return f"load average {load:.1f} at the start" if load is not None else "load average not recorded"


def write_doc(text: str, path: Path) -> None:
    """Replace (or append) our section of docs/performance.md, leaving every other section alone."""
    old = path.read_text() if path.exists() else "# Performance\n"
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text.rstrip("\n") + "\n" + (old[end:] if end >= 0 else "")
    write_atomically(path, new)


def single_threaded_blas() -> None:
    """One BLAS thread per call in the local pods (they inherit this environment).

    A CPU pod already runs two leaf launches at once (its compute workers), and 2 or 4 pods share
    the machine's cores; OpenBLAS's own threads on top of that oversubscribe the cores, and its
    threads spin while they wait, so launches slow down by up to 2x at random. Measured on the
    2-core machine (matmul, 2 pods, 1024^3): jobs took 0.26-0.56 s with the default threads and
    0.13-0.19 s with one. The parallelism is the pods' and their workers'; a variable already set
    by the caller is kept."""
    for name in blas.THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes", default="2,4")
    p.add_argument("--kernels", default="matmul,flash_attention")
    p.add_argument("--write-doc", action="store_true")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--from-json", metavar="FILE", help="measure nothing: render results written by --json")
    args = p.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        results = saved["results"] if isinstance(saved, dict) else saved
        reps = saved.get("reps", args.reps) if isinstance(saved, dict) else args.reps
        load = saved.get("load") if isinstance(saved, dict) else None
        text = markdown(results, reps, load)
        if args.write_doc:
            write_doc(text, ROOT / "docs" / "performance.md")
        else:
            print(text)
        return 0 if all(r["within_tolerance"] for r in results) else 1
    single_threaded_blas()

    import capnp

    from common import log

    log.configure("warning")
    results = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="phobos-validation-") as tmp:
        folder = Path(tmp)
        os.environ["PHOBOS_CACHE_DIR"] = str(folder / "cache")  # measure afresh, not from a cache
        for name in args.kernels.split(","):
            for nodes in (int(n) for n in args.nodes.split(",")):
                print(f"== {name} on {nodes} CPU pods", flush=True)
                result = asyncio.run(capnp.run(validate(CASES[name], nodes, args.reps, folder, print)))
                for row in result["rows"]:
                    print(f"  {row['combination']:<34} predicted {row['predicted_s']:.3f} s  measured "
                          f"{row['measured_s']:.3f} s  runs {[round(t, 3) for t in row['runs_s']]}")
                over = 100 * result["chosen_over_best"]
                best = result["best_measured"]
                print(f"  chosen {result['chosen']} is {over:+.1f}% from the best ({best})", flush=True)
                results.append(result)
    text = markdown(results, args.reps, load)
    if args.json:
        saved = {"results": results, "reps": args.reps, "load": load}
        Path(args.json).write_text(json.dumps(saved, indent=1))
    if args.write_doc:
        write_doc(text, ROOT / "docs" / "performance.md")
    else:
        print(text)
    return 0 if all(r["within_tolerance"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
