"""`//benchmarks`: run the cluster benchmarks, keep their results, render them into the docs.

    tools/bazel run //benchmarks -- [--quick] [--cases cpu|gpu|all] [--no-render]
    PYTHONPATH=. .venv/bin/python benchmarks/main.py --quick        # the same, from a checkout

It runs pytest with pytest-benchmark on benchmarks/test_cluster_runtime.py (or the files given),
saving with `--benchmark-save=cluster --benchmark-storage=benchmarks/results/<machine>`, where
<machine> names the GPU the run can see (e.g. nvidia-h200) or the CPU (e.g. cpu-amd-epyc-2core),
so pytest-benchmark's own `compare` works on them:

    .venv/bin/pytest-benchmark --storage benchmarks/results/<machine> compare

then (unless --no-render) benchmarks/render.py rewrites the "Cluster benchmarks" section of
docs/performance.md from the latest result of every machine. --quick runs fewer rounds (under
five minutes on a 2-core CPU); the full run is meant for the GPU machine. --results DIR saves
under DIR/<machine> instead (the device script saves under $OUT).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

HERE = Path(os.path.abspath(__file__)).parent
if str(HERE.parent) not in sys.path:  # `python benchmarks/main.py` from a checkout
    sys.path.insert(0, str(HERE.parent))

from common.cli import run_main, user_path  # noqa: E402
from common.errors import UserError  # noqa: E402

DEFAULT_FILES = ("benchmarks/test_cluster_runtime.py",)


def source_root() -> Path:
    """The checkout: results and docs are written there even under `bazel run` (runfiles are
    read-only copies); BUILD_WORKSPACE_DIRECTORY is where `bazel run` was called for."""
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    return Path(workspace) if workspace else HERE.parent


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_label(with_gpu: bool) -> str:
    """nvidia-h200 where a GPU is visible and GPU cases run; else the CPU and its core count."""
    if with_gpu:
        from benchmarks.cluster_anchors import gpu_missing, gpu_name

        if not gpu_missing():
            return slug(gpu_name())
    from benchmarks.cluster_anchors import cpu_brand

    words = slug(cpu_brand()).split("-")[:3]
    return "cpu-" + "-".join(w for w in words if w) + f"-{os.cpu_count()}core"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds: under 5 minutes on a 2-core CPU")
    p.add_argument("--cases", choices=("cpu", "gpu", "all"), default="all",
                   help="which cases (default all; GPU cases skip where no GPU is present)")
    p.add_argument("--results", metavar="DIR",
                   help="results folder; the run saves under DIR/<machine> (default benchmarks/results)")
    p.add_argument("--machine", help="the machine's name in the results path (default: detected)")
    p.add_argument("--no-render", action="store_true", help="do not rewrite docs/performance.md")
    p.add_argument("files", nargs="*", help=f"benchmark files (default: {' '.join(DEFAULT_FILES)})")
    return p


def main(argv: list[str]) -> int:
    import pytest

    args = build_parser().parse_args(argv)
    root = source_root()
    machine = args.machine or machine_label(args.cases != "cpu")
    results = (user_path(args.results) if args.results else root / "benchmarks" / "results") / machine
    results.mkdir(parents=True, exist_ok=True)
    files = [str(HERE.parent / f) for f in (args.files or DEFAULT_FILES)]
    for f in files:
        if not Path(f).exists():
            raise UserError(f"benchmark file {f} does not exist")
    os.environ["PHOBOS_BENCH_QUICK"] = "1" if args.quick else "0"
    os.environ["PHOBOS_BENCH_CASES"] = args.cases
    name = "cluster-quick" if args.quick else "cluster"
    code = pytest.main([
        *files, "-q", "-p", "no:cacheprovider", f"--rootdir={HERE.parent}",
        "--benchmark-only", f"--benchmark-save={name}", f"--benchmark-storage=file://{results}",
        "--benchmark-columns=min,median,max,rounds",
    ])
    print(f"results saved under {results}")
    if code == 0 and not args.no_render:
        from benchmarks.render import render_into_docs

        written = render_into_docs(root / "benchmarks" / "results", root / "docs")
        print(f"rendered {', '.join(str(p) for p in written)}")
    return int(code)


if __name__ == "__main__":
    run_main(main)
