"""Render the latest cluster benchmark results into docs/performance.md (tables) and PNG plots.

    PYTHONPATH=. .venv/bin/python benchmarks/render.py [--results benchmarks/results] [--docs docs]

For every machine folder under the results (benchmarks/results/<machine>/, as benchmarks/main.py
saves them) and every pod device (cpu, gpu), the newest saved pytest-benchmark JSON holding such
cases is shown (a GPU run and a CPU run on one machine may be separate runs): one table each, and
one figure each (docs/images/perf-cluster-<machine>-<device>.png) when matplotlib is
importable (tables only otherwise; the section says so). Only the "## Cluster benchmarks" section
of docs/performance.md is rewritten; other sections (the leaf and tuner sections, written by
their own benchmarks) are kept byte for byte. The file is written atomically.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(os.path.abspath(__file__)).parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from common.atomic import write_atomically  # noqa: E402

SECTION = "## Cluster benchmarks"
CASE_TEST = "test_cluster_job"
KIND_ORDER = {"matmul": 0, "attention": 1, "add": 2}


@dataclass(frozen=True)
class Run:
    machine: str  # the results folder's name
    path: Path
    when: str  # ISO datetime pytest-benchmark recorded
    machine_info: dict
    commit: str
    rows: tuple[dict, ...]  # one extra_info per case, with the timing stats merged in
    device: str = ""  # set when the rows are one device's

    @property
    def key(self) -> str:
        return f"{self.machine}-{self.device}" if self.device else self.machine

    @property
    def title(self) -> str:
        return f"{self.machine}, {self.device} pods" if self.device else self.machine


# ---- reading -----------------------------------------------------------------------------------------


def read_run(machine: str, path: Path) -> Run | None:
    """The cluster cases of one saved JSON, or None when it holds none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    rows = []
    for bench in data.get("benchmarks", []):
        if not bench.get("name", "").startswith(CASE_TEST) or "case" not in bench.get("extra_info", {}):
            continue
        stats = bench.get("stats", {})
        rows.append({**bench["extra_info"], "min_s": stats.get("min"), "median_s": stats.get("median"),
                     "rounds": stats.get("rounds")})
    if not rows:
        return None
    rows.sort(key=_row_order)
    commit = data.get("commit_info", {})
    commit_text = (commit.get("id") or "")[:10] + (" (dirty)" if commit.get("dirty") else "")
    when = data.get("datetime", "")
    return Run(machine, path, when, data.get("machine_info", {}), commit_text, tuple(rows))


def _row_order(row: dict) -> tuple:
    tiles = tuple(sorted(row.get("cluster_values", {}).items()))
    return row["device"], KIND_ORDER.get(row["kind"], 9), row["problem"], tiles, row["pods"]


def latest_runs(results: Path) -> list[Run]:
    """Per machine folder (in name order) and pod device: the rows of the newest full run with such
    cases, or of the newest quick run where there is no full one."""
    runs = []
    if not results.is_dir():
        return runs
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        found = [r for r in (read_run(folder.name, p) for p in folder.rglob("*.json")) if r is not None]
        for device in sorted({row["device"] for run in found for row in run.rows}):
            # a full run is preferred to a newer quick one (fewer rounds: noisier)
            newest = max((r for r in found if any(row["device"] == device for row in r.rows)),
                         key=lambda r: (not any(row.get("quick") for row in r.rows), r.when))
            rows = tuple(row for row in newest.rows if row["device"] == device)
            runs.append(replace(newest, rows=rows, device=device))
    return runs


# ---- tables ----------------------------------------------------------------------------------------------


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


def _s(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def machine_line(run: Run) -> str:
    info = run.machine_info
    cpu = (info.get("cpu") or {}).get("brand_raw") or info.get("processor") or "?"
    gpu = info.get("gpu")
    gpu_text = f", GPU {gpu['name']} x{gpu.get('count', 1)}" if gpu else ", no GPU"
    quick = any(r.get("quick") for r in run.rows)
    loads = [x for r in run.rows for x in r.get("load_average", [])]
    load_text = f"; 1-minute load average {min(loads):.1f} to {max(loads):.1f}" if loads else ""
    return (f"{run.when[:16].replace('T', ' ')} UTC, commit {run.commit or '?'}; CPU {cpu} "
            f"({info.get('cpu_count', '?')} cores){gpu_text}; {'quick' if quick else 'full'} run "
            f"({run.rows[0].get('rounds', '?')} timed rounds per case, median shown){load_text}")


def table(run: Run) -> str:
    head = ("| device | kernel | problem | super-tile | pods | job s | anchor | anchor s | bound s (by) "
            "| × anchor | × bound | units | leaf s (busiest pod) | loaded MB | fetched MB |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in run.rows:
        lines.append(
            f"| {r['device']} | {r['kind']} | {r['problem']} | {r['tile']} | {r['pods']} | {_s(r['job_s'])} "
            f"| {r['anchor']} | {_s(r['anchor_s'])} | {_s(r['bound_s'])} ({r['bound_limited_by']}) "
            f"| {r['ratio_to_anchor']:.2f} | {r['ratio_to_bound']:.2f} | {r.get('units', '?')} "
            f"| {_s(r.get('compute_s_busiest', float('nan')))} "
            f"| {_mb(r.get('bytes_loaded', 0))} | {_mb(r.get('bytes_fetched', 0))} |")
    return "\n".join(lines)


def storage_line(run: Run) -> str:
    parts = []
    seen = set()
    for r in run.rows:
        key = (r["device"], r["kind"], r["problem"])
        if key in seen:
            continue
        seen.add(key)
        parts.append(f"{r['kind']} {r['problem']}: {r['storage_read_gbps']:.2f} GB/s cold, "
                     f"{r.get('storage_read_warm_gbps', float('nan')):.2f} GB/s warm")
    return "Storage read bandwidth measured in the run (inputs of each problem, fresh memory map): " + \
        "; ".join(parts) + "."


# ---- plots ---------------------------------------------------------------------------------------------


def plot(run: Run, path: Path) -> bool:
    """One figure: a panel per (device, kernel); bars = job time / bound per super-tile, one bar
    per pod count (each case against its own bound, measured beside it); the line at 1 is the
    bound. False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups: dict[tuple, list[dict]] = {}
    for r in run.rows:
        groups.setdefault((r["device"], r["kind"], r["problem"]), []).append(r)
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, ((device, kind, problem), rows) in zip(axes[0], groups.items(), strict=True):
        tiles = list(dict.fromkeys(r["tile"] for r in rows))
        pods = sorted({r["pods"] for r in rows})
        width = 0.8 / len(pods)
        for i, p in enumerate(pods):
            xs, ys = [], []
            for r in rows:
                if r["pods"] == p:
                    xs.append(tiles.index(r["tile"]) + (i - (len(pods) - 1) / 2) * width)
                    ys.append(r["ratio_to_bound"])
            ax.bar(xs, ys, width, label=f"{p} pod{'s' if p > 1 else ''}")
        limits = sorted({r["bound_limited_by"] for r in rows})
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label=f"bound ({'/'.join(limits)})")
        ax.set_xticks(range(len(tiles)))
        ax.set_xticklabels(tiles, fontsize=8)
        ax.set_title(f"{device} {kind} {problem}", fontsize=9)
        ax.set_ylabel("job time / bound")
        ax.legend(fontsize=7)
    fig.suptitle(f"cluster benchmarks: {run.title}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    image = io.BytesIO()
    try:
        fig.savefig(image, format="png", dpi=110)
    finally:
        plt.close(fig)
    write_atomically(path, image.getvalue())
    return True


# ---- the docs section --------------------------------------------------------------------------------


INTRO = """\
Matmul (with a cluster loop over K), flash attention and vector add run through the whole runtime:
the scheduler's own code (prepare, plan, submit) driving real pod processes over Cap'n Proto RPC,
reading and writing .npy files. CPU pods run the reference interpreter; GPU pods run the CUDA
leaves (two GPU pods share one GPU). Each case is run once and checked against a float64 numpy
reference, then timed; each timed job starts from cold storage (the tensors' pages are dropped
from the page cache), and the pods are already running (start-up is not timed).

- **anchor**: a library doing the whole problem on one device with the data in memory: numpy on
  the CPU; cupy.matmul (cuBLAS SGEMM f32), torch scaled_dot_product_attention (f32, one head),
  cupy.add on a GPU.
- **bound**: what a perfect runtime could reach, max(inputs' bytes / storage read bandwidth,
  anchor time): reading and computing overlap at best, and all pods share one host, so more pods
  add no compute. Writing the output is not counted. The storage read bandwidth (cold: fresh
  memory maps of the inputs after dropping their pages, copied into memory, best of three) and
  the anchor are measured right before each case's timed rounds, so that a ratio compares
  figures taken under the same machine load (the load average is shown per run).
- **× anchor**, **× bound**: job time divided by each (1.0 = as fast; higher = slower).
- **leaf s (busiest pod)**: the summed compute-instruction time of the pod that computed longest
  (from the scheduler's trace; concurrent computes on one pod are summed, so it can exceed the job).

Reading the CPU tables: all pods of a case share the machine's cores (two on the CI machine), so
more pods can only help by overlapping one pod's loads, fetches and Python work with another's
compute; the anchor already uses every core through numpy's BLAS. A super-tile as large as the
problem gives one unit, which one pod runs while the others idle. For add, the leaves are a small
part of the job (compare "leaf s" with "job s"): the rest is moving data, the loads and the store
into a staging copy of the output (itself a copy of the old file) committed with fsync, and the
bound counts only the reads.

Kernels: benchmarks/kernels/cluster_*.phk (the seed's kernels with @cluster sizes for a CPU run,
and `_gpu` copies sized for one H200). Run: `tools/bazel run //benchmarks -- --quick` (CPU, under
five minutes on 2 cores) or `benchmarks/cluster_device_run.sh` on the GPU machine; then
`PYTHONPATH=. .venv/bin/python benchmarks/render.py` rewrites this section from the newest result
of each machine under benchmarks/results/."""


def section_text(runs: list[Run], images: dict[str, str | None], plots_available: bool) -> str:
    parts = [SECTION, "", INTRO, ""]
    if not plots_available:
        parts += ["(matplotlib was not importable when this was rendered: tables only.)", ""]
    if not runs:
        parts += ["No results yet.", ""]
    for run in runs:
        parts += [f"### {run.title}", "", machine_line(run), "", table(run), "", storage_line(run), ""]
        if images.get(run.key):
            parts += [f"![cluster benchmarks: {run.title}]({images[run.key]})", ""]
        rel = run.path.as_posix()
        marker = "benchmarks/results/"
        parts += [f"Source: `{rel[rel.index(marker):] if marker in rel else run.path.name}`", ""]
    return "\n".join(parts).rstrip() + "\n"


def replace_section(document: str, section: str) -> str:
    """`document` with its "## Cluster benchmarks" section (up to the next "## " heading) replaced
    by `section`, or with `section` appended when there is none."""
    lines = document.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION), None)
    if start is None:
        head = document if document.endswith("\n") or not document else document + "\n"
        if not head:
            head = "# Performance\n"
        return head + ("\n" if not head.endswith("\n\n") else "") + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")


def render_into_docs(results: Path, docs: Path) -> list[Path]:
    runs = latest_runs(results)
    images: dict[str, str | None] = {}
    written = []
    plots_available = True
    for run in runs:
        image = docs / "images" / f"perf-cluster-{run.key}.png"
        if plot(run, image):
            images[run.key] = f"images/{image.name}"
            written.append(image)
        else:
            plots_available = False
    doc = docs / "performance.md"
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    doc.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(doc, replace_section(old, section_text(runs, images, plots_available)))
    written.append(doc)
    return written


def main(argv: list[str]) -> int:
    from benchmarks.main import source_root

    root = source_root()
    p = argparse.ArgumentParser(prog="render", description="Render cluster benchmark results into the docs.")
    p.add_argument("--results", default=str(root / "benchmarks" / "results"), help="results folder")
    p.add_argument("--docs", default=str(root / "docs"), help="docs folder")
    args = p.parse_args(argv)
    for path in render_into_docs(Path(args.results), Path(args.docs)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from common.cli import run_main

    run_main(main)
