"""First-call time (cold cache: tune + compile) and cached-call time of a phobos kernel called with
torch tensors, and its speed against torch.matmul (cuBLAS) in the same process.

    python3 benchmarks/first_call.py --kernel examples/matmul_bf16.phk --sizes 4096 8192 --out r.json

Each size runs in a fresh cache folder (PHOBOS_CACHE_DIR under a temp dir). Figures: first call
(s, wall, includes the tuning the first call does and its progress lines on stderr), the second
call's host time (ms, a cache hit: no tuning, no compile), and the median of 20 timed runs of phobos
and of torch.matmul on the same operands (CUDA events, alternated rounds)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import gpu_timing

_events_ms = gpu_timing.events_ms


def measure(kernel_path: Path, n: int) -> dict:
    import torch

    import phobos

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float32)
    kernel = phobos.load(kernel_path)
    t0 = time.perf_counter()
    kernel(a, b, c)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernel(a, b, c)
    torch.cuda.synchronize()
    second_ms = (time.perf_counter() - t0) * 1e3
    err = float((c - (a.float() @ b.float())).norm() / (a.float() @ b.float()).norm())
    ours, theirs = [], []
    for _ in range(4):
        ours.append(_events_ms(lambda: kernel(a, b, c), torch))
        theirs.append(_events_ms(lambda: torch.matmul(a, b, out=None), torch))
    p, t = statistics.median(ours), statistics.median(theirs)
    tflops = 2 * n**3 / 1e12
    return {"n": n, "first_call_s": round(first_s, 2), "second_call_ms": round(second_ms, 2),
            "phobos_ms": round(p, 4), "cublas_bf16_ms": round(t, 4), "ratio_vs_cublas": round(t / p, 3),
            "phobos_tflops": round(tflops / (p / 1e3), 1), "rel_err": err}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", type=Path, default=Path("examples/matmul_bf16.phk"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for n in args.sizes:
        os.environ["PHOBOS_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"phobos-first-{n}-")
        rows.append(measure(args.kernel.resolve(), n))
        print(json.dumps(rows[-1]), flush=True)
    import torch

    result = {"device": torch.cuda.get_device_name(), "kernel": str(args.kernel), "rows": rows,
              "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
