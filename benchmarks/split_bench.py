"""Split reductions on real pods: split-K matmul and split-KV decode on 1, 2 and 4 pods against the
one-node run of the same job, in one run; on a GPU, also torch's SDPA on the whole decode.

    python benchmarks/split_bench.py --pods 1,2,4 --reps 3 --out results.json [--markdown FILE]
    python benchmarks/split_bench.py --cases decode:20,decode:22 --pods 2 --sdpa --out ...   (GPU)

Per pod count the pods are started once (local pods: CPU pods here, one per visible GPU or several
sharing one there) and every job of that count runs on them, `--reps` times, in turns (so that a
drift of the machine's load touches every variant alike). The variants: on one pod the plain job
(the baseline); on n > 1 pods the job unsplit (one unit: one node works), then split over n shares
by a flat and, from 4 shares, a binary tree. A job's time is the scheduler's wall time (prepare,
plan, submit, every instruction, commit), the median of the reps. From each run's trace:

    steps     the busiest node's step launches (its share of the chunks)
    tree      from the last step's end on any node to the root's last merge's end: the partials'
              transfers and the merges on the root's path (0 unsplit)
    merge     the root's merge launches
    fetch     the root's fetches of partials, each from when its writer's last launch ended
    loads     the time during which the busiest node loads from storage (some load running)
    compute   from the first step's start to the last launch's end (the finish): the job's time
              less the loads before it and the store after it

With more shares than pods a pod runs several shares' launches at once, and `steps` and `merge`
sum them (they can exceed the wall time).

and the tuner's prediction for the same program and pod count (scheduler/tuning/tuner.py): with the default
figures of the pods' backend, and with `--calibrate`, with figures calibrated on the same pods by
the tuner's own probes (scheduler/tuning/calibrate.py, run after the timed jobs), to set beside the
measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Problem:
    name: str
    kernel: str  # path from the repo root
    dims: dict
    scalars: dict
    cluster: dict
    inputs: dict  # tensor -> shape (f32)
    output: str


def problems(spec: str) -> list[Problem]:
    out = []
    for item in spec.split(","):
        name, _, size = item.partition(":")
        if name == "splitk":
            k = 1 << int(size or 16)
            out.append(Problem(f"splitk-K2^{size or 16}", "examples/jobs/matmul_split_k.phk",
                               {"M": 256, "N": 256, "K": k}, {"alpha": 1.0, "beta": 0.0}, {"TILE_K": 4096},
                               {"A": (256, k), "B": (k, 256)}, "C"))
        elif name == "decode":
            s = 1 << int(size or 20)
            out.append(Problem(f"decode-S2^{size or 20}", "examples/decode_gqa.phk",
                               {"G": 8, "D": 128, "S": s}, {"scale": 1 / np.sqrt(128)}, {"BS": 65536},
                               {"Q": (8, 128), "K": (s, 128), "V": (s, 128)}, "O"))
        else:
            raise SystemExit(f"unknown case {item!r} (splitk[:log2 K], decode[:log2 S])")
    return out


def write_inputs(problem: Problem, folder: Path) -> dict[str, str]:
    rng = np.random.default_rng(0)
    uris = {}
    for name, shape in problem.inputs.items():
        path = folder / f"{problem.name}-{name}.npy"
        if not path.exists():
            np.save(path, rng.standard_normal(shape, dtype=np.float32))
        uris[name] = path.as_uri()
    out = folder / f"{problem.name}-{problem.output}.npy"
    if problem.name.startswith("splitk"):  # C = alpha * A @ B + beta * C reads C (beta = 0 here)
        np.save(out, np.zeros((problem.dims["M"], problem.dims["N"]), np.float32))
    uris[problem.output] = out.as_uri()
    return uris


def variants(pods: int, extra: tuple[int, ...] = ()) -> list:
    """`extra`: more share counts, split by a binary tree (more shares than pods: a pod runs several
    shares' chains at once, as many as it runs launches at once)."""
    from compiler.cluster.tree import SplitRequest

    if pods == 1:
        return [None]
    out = [None, SplitRequest(pods, "flat")]
    if pods >= 4:
        out.append(SplitRequest(pods, "binary"))
    return out + [SplitRequest(n, "binary") for n in extra if n != pods]


def label(split) -> str:
    return "unsplit" if split is None else f"split {split.shares} {split.shape}"


def breakdown(trace: dict) -> dict:
    """Where a run's time went (module doc), from its trace events (seconds)."""
    events = [e for e in trace["events"] if e["ok"] and e["end"] is not None]
    steps = [e for e in events if e["kind"] == "compute" and (e["leaf"] or "").split("@")[0] == "step"]
    merges = [e for e in events if e["kind"] == "compute" and (e["leaf"] or "").startswith("merge")]
    per_node: dict[int, float] = {}
    for e in steps:
        per_node[e["node"]] = per_node.get(e["node"], 0.0) + e["end"] - e["start"]
    busiest = max(per_node, key=per_node.get) if per_node else 0
    root = max(merges, key=lambda e: e["end"])["node"] if merges else busiest
    last_step = max((e["end"] for e in steps), default=0.0)
    last_merge = max((e["end"] for e in merges), default=last_step)
    # A fetch of a partial waits for its writer: count it from the writer's last compute before it.
    computes = [e for e in events if e["kind"] == "compute"]
    fetch_s = 0.0
    for e in events:
        if e["kind"] == "fetch" and e["node"] == root and e["peer"] in per_node:
            ready = max((c["end"] for c in computes if c["node"] == e["peer"] and c["end"] <= e["end"]),
                        default=e["start"])
            fetch_s += e["end"] - max(e["start"], ready)
    loads = _covered([(e["start"], e["end"]) for e in events if e["kind"] == "load" and e["node"] == busiest])
    compute_span = max(c["end"] for c in computes) - min(e["start"] for e in steps) if steps else 0.0
    return {"steps_s": per_node.get(busiest, 0.0), "tree_s": max(0.0, last_merge - last_step),
            "merge_s": sum(e["end"] - e["start"] for e in merges if e["node"] == root),
            "fetch_s": fetch_s, "loads_s": loads,
            "nodes_computing": len({e["node"] for e in steps}),
            "compute_span_s": compute_span,
            "span_s": max(e["end"] for e in events) - min(e["start"] for e in events)}


def _covered(spans: list[tuple[float, float]]) -> float:
    """Seconds during which at least one of `spans` runs (loads overlap: their sum would count
    the same second several times)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def default_figures(pods: int, backend: str):
    from scheduler.tuning.tuner_cli import TuneOptions, base_figures

    return base_figures(TuneOptions(nodes=pods), pods, [backend] * pods, [0] * pods)


def predicted(program, figures) -> float:
    from scheduler.jobs.prepare import split_of
    from scheduler.tuning.tuner import evaluate_program

    return evaluate_program(program, figures, 0, split_of(program)).prediction.total_s


async def calibrated(session, prepared, options, order, programs, base, say):
    """The tuner's figures measured on these pods (`--calibrate`'s probes) for these programs."""
    from scheduler.jobs.prepare import split_of
    from scheduler.tuning import calibrate as cal
    from scheduler.tuning.tuner import evaluate_program
    from scheduler.tuning.tuner_cli import candidate_compiler

    candidates = [evaluate_program(p, base, i, split_of(p)) for i, p in enumerate(programs)]
    return await cal.calibrate(session, prepared, options, order, candidates, base,
                               candidate_compiler(prepared), say)


async def measure(problem: Problem, pods: int, reps: int, folder: Path, say, extra=(),
                  calibrate: bool = False) -> list[dict]:
    from common.errors import UserError
    from scheduler.jobs.jobfile import build_job, write_job
    from scheduler.jobs.prepare import new_job_id, prepare, recompile
    from scheduler.running.run import PodSession, RunOptions, start_pods_for

    uris = write_inputs(problem, folder)
    job = build_job(ROOT / problem.kernel, None, problem.dims, problem.scalars, uris,
                    cluster_values=problem.cluster)
    job_path = folder / f"{problem.name}.job"
    write_job(job, job_path)
    prepared = prepare(job, job_path, [folder])
    options = RunOptions(local_pods=pods, storage_roots=(folder,))
    local = await start_pods_for(options)
    session = PodSession(local.addresses, local.token)
    try:
        await session.open()
        order = sorted(session.pods)
        backend = session.infos[order[0]].backend
        jobs, rows = {}, []
        for split in variants(pods, extra):
            try:
                jobs[label(split)] = recompile(prepared, dict(problem.cluster), split=split)
            except UserError as err:  # e.g. more shares than chunks: said and kept
                say(f"{problem.name} {label(split)}: {err}")
                rows.append({"problem": problem.name, "pods": pods, "variant": label(split),
                             "error": str(err)})
        runs: dict[str, list] = {name: [] for name in jobs}
        for rep in range(reps + 1):  # the first round warms the pods (leaf compiles, page cache)
            for name, j in list(jobs.items()):
                result = await session.run(dataclasses.replace(j, job_id=new_job_id()), options, order)
                if not result.ok:  # said and kept, and the other variants still run
                    say(f"{problem.name} {name} on {pods} pods failed: {result.reason}")
                    rows.append({"problem": problem.name, "pods": pods, "variant": name,
                                 "error": result.reason})
                    del jobs[name]
                elif rep:
                    runs[name].append((result.wall_s, breakdown(result.trace)))
        base = default_figures(pods, backend)
        measured = await calibrated(session, prepared, options, order, [j.program for j in jobs.values()],
                                    base, say) if calibrate and jobs else None
        for name, j in jobs.items():
            walls = [w for w, _ in runs[name]]
            median = statistics.median(walls)
            parts = min(runs[name], key=lambda r: abs(r[0] - median))[1]
            rows.append({"problem": problem.name, "pods": pods, "backend": backend, "variant": name,
                         "wall_s": median, "runs_s": walls, **parts,
                         "predicted_s": predicted(j.program, base),
                         "calibrated_s": predicted(j.program, measured) if measured else None})
            say(f"{problem.name:>16} {pods} pods {name:<16} {median:8.3f} s  {json.dumps(parts)}")
        return rows
    finally:
        await session.close()
        await local.stop()


def sdpa(problem: Problem, folder: Path, reps: int) -> list[dict]:
    """torch's scaled_dot_product_attention on the whole decode on one GPU: the 8 query heads of one
    KV head are 8 query rows of one head (each row attends to every key alone), f32 and bf16."""
    import torch
    import torch.nn.functional as F

    q = torch.from_numpy(np.load(folder / f"{problem.name}-Q.npy")).cuda()[None, None]
    k = torch.from_numpy(np.load(folder / f"{problem.name}-K.npy", mmap_mode="r")[:]).cuda()[None, None]
    v = torch.from_numpy(np.load(folder / f"{problem.name}-V.npy", mmap_mode="r")[:]).cuda()[None, None]
    scale = problem.scalars["scale"]
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        a, b, c = q.to(dtype), k.to(dtype), v.to(dtype)
        for _ in range(3):
            F.scaled_dot_product_attention(a, b, c, scale=scale)
        times = []
        for _ in range(max(reps, 10)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            F.scaled_dot_product_attention(a, b, c, scale=scale)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        o = F.scaled_dot_product_attention(a, b, c, scale=scale)[0, 0].float().cpu().numpy()
        out.append({"problem": problem.name, "variant": f"torch sdpa {str(dtype).split('.')[-1]}",
                    "kernel_s": statistics.median(times), "output": o})
        del a, b, c
    return out


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.3f} s"


def markdown(rows: list[dict], command: str) -> str:
    lines = [f"`{command}`", "",
             "| problem | pods | variant | job wall | vs one node | predicted | calibrated | nodes computing "
             "| busiest steps | tree | root merges | root partial fetches | busiest loads |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {r["problem"]: r["wall_s"] for r in rows if r.get("pods") == 1}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | {r.get('pods', '-')} | {r['variant']} | failed: {r['error']} |")
        if "wall_s" not in r:
            continue
        speed = f"{base[r['problem']] / r['wall_s']:.2f}x" if r["problem"] in base else "-"
        lines.append(f"| {r['problem']} | {r['pods']} | {r['variant']} | {r['wall_s']:.3f} s | {speed} "
                     f"| {r['predicted_s']:.3f} s | {_seconds(r.get('calibrated_s'))} "
                     f"| {r['nodes_computing']} | {r['steps_s']:.3f} s "
                     f"| {r['tree_s']:.4f} s "
                     f"| {r['merge_s']:.4f} s | {r['fetch_s']:.4f} s | {r['loads_s']:.3f} s |")
    for r in rows:
        if "kernel_s" in r:
            ours = [x for x in rows if x["problem"] == r["problem"] and "compute_span_s" in x]
            best = min(ours, key=lambda x: x["compute_span_s"], default=None)
            vs = (f"; phobos's best compute span ({best['variant']} on {best['pods']} pods) "
                  f"{best['compute_span_s'] * 1e3:.1f} ms: SDPA time / ours = "
                  f"{r['kernel_s'] / best['compute_span_s']:.2f}x (above 1, phobos is faster); "
                  f"its job wall {best['wall_s']:.2f} s") if best else ""
            lines.append(f"\n{r['problem']}: {r['variant']} {r['kernel_s'] * 1e3:.3f} ms "
                         f"(the kernel alone, CUDA events){vs}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="splitk:16,decode:20")
    p.add_argument("--pods", default="1,2,4")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sdpa", action="store_true", help="also time torch SDPA on the decode cases (GPU)")
    p.add_argument("--extra-shares", default="", help="more share counts to run (comma-separated)")
    p.add_argument("--calibrate", action="store_true",
                   help="also predict with figures calibrated on the pods (--calibrate's probes, after "
                        "the runs)")
    p.add_argument("--data", help="folder for the inputs (default: a temporary one)")
    p.add_argument("--out", required=True, help="JSON results")
    p.add_argument("--markdown", help="also write the table here")
    args = p.parse_args(argv)
    from benchmarks.model_validation import single_threaded_blas

    single_threaded_blas()
    import capnp

    from common import log

    log.configure("warning")
    command = "python benchmarks/split_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="phobos-split-", dir=args.data) as tmp:
        folder = Path(tmp)
        os.environ["PHOBOS_CACHE_DIR"] = str(folder / "cache")  # calibrate afresh, not from a cache
        for problem in problems(args.cases):
            for pods in (int(n) for n in args.pods.split(",")):
                started = time.monotonic()
                extra = tuple(int(n) for n in args.extra_shares.split(",") if n)
                rows += asyncio.run(capnp.run(measure(problem, pods, args.reps, folder, print, extra,
                                                      args.calibrate)))
                print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
                _save(rows, args, command)
            if args.sdpa and problem.name.startswith("decode"):
                ours = np.load(folder / f"{problem.name}-O.npy")
                try:
                    anchors = sdpa(problem, folder, args.reps)
                except Exception as err:  # said and kept: the pods' figures stand on their own
                    anchors = []
                    print(f"torch SDPA failed: {err}", flush=True)
                    rows.append({"problem": problem.name, "variant": "torch sdpa", "error": str(err)})
                for r in anchors:
                    r["max_diff_vs_phobos"] = float(np.max(np.abs(r.pop("output") - ours)))
                    print(f"{problem.name} {r['variant']}: {r['kernel_s'] * 1e3:.3f} ms, "
                          f"max |O - phobos O| {r['max_diff_vs_phobos']:.2e}", flush=True)
                    rows.append(r)
                _save(rows, args, command)
    print(markdown(rows, command))
    return 0


def _save(rows, args, command) -> None:
    load = os.getloadavg()[0]
    Path(args.out).write_text(json.dumps({"command": command, "load": load, "rows": rows}, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, command))


if __name__ == "__main__":
    sys.exit(main())
