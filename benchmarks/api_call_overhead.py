"""Overhead of a phobos.Kernel call, from Python to the launch, against a plain cupy RawKernel.

In one process on one GPU, for a kernel already compiled and tuned (the first call, made before
timing, does that): a tiny add (2^12 f32 elements, so the GPU finishes each kernel long before the
next launch is queued and the time per call is host time), launched back to back `--launches`
times and synchronized once at the end, alternating in rounds:

- raw: a hand-written CUDA add as a `cupy.RawKernel`, called with cupy arrays and an int;
- phobos/cupy: `kernel(a, b, c)` on the same cupy arrays (examples/add.phk, BLOCK pinned);
- phobos/torch: `kernel(a, b, c)` on torch tensors, when torch is installed;
- before-launch/cupy and before-launch/torch: the Python path of a phobos call without the launch
  itself (argument binding, array checks, the prepared launch's lookup, the caller's stream), run
  the same way, so that the split of the overhead is visible.

Reported: microseconds per call (medians over rounds) and the difference phobos - raw, the
overhead issue 20 bounds at 20 us. Needs a GPU:
    python3 benchmarks/api_call_overhead.py --out $OUT/api-call-overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

N = 1 << 12
RAW_SOURCE = r"""
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""


def per_call_us(call, launches: int, synchronize) -> float:
    synchronize()
    start = time.perf_counter()
    for _ in range(launches):
        call()
    synchronize()
    return (time.perf_counter() - start) / launches * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out")
    args = p.parse_args(argv)
    import cupy

    import phobos

    a, b = cupy.arange(N, dtype=cupy.float32), cupy.ones(N, cupy.float32)
    c = cupy.zeros(N, cupy.float32)
    raw = cupy.RawKernel(RAW_SOURCE, "add")
    kernel = phobos.load(Path(__file__).resolve().parent.parent / "examples" / "add.phk").bind(
        tiles={"BLOCK": 4096})
    grid, block, n = ((N + 255) // 256,), (256,), cupy.int32(N)
    cases = {
        "raw": lambda: raw(grid, block, (a, b, c, n)),
        "phobos/cupy": lambda: kernel(a, b, c),
        "before-launch/cupy": lambda: kernel._gpu_launch(kernel._arguments((a, b, c), {})),
    }
    sync = cupy.cuda.get_current_stream().synchronize
    syncs = dict.fromkeys(cases, sync)
    versions = {"python": sys.version.split()[0], "cupy": cupy.__version__}
    try:
        import torch

        ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (a, b, c))
        cases["phobos/torch"] = lambda: kernel(ta, tb, tc)
        cases["before-launch/torch"] = lambda: kernel._gpu_launch(kernel._arguments((ta, tb, tc), {}))
        syncs["phobos/torch"] = syncs["before-launch/torch"] = torch.cuda.synchronize
        versions["torch"] = torch.__version__
    except ImportError:
        pass
    for name, call in cases.items():  # compile, load, warm up; check the result once
        call()
        syncs[name]()
    assert bool((c == a + b).all())
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, call in cases.items():
            times[name].append(per_call_us(call, args.launches, syncs[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    report = {
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "elements": N, "launches": args.launches, "rounds": args.rounds,
        "versions": versions,
        "us_per_call": medians,
        "us_per_call_rounds": times,
        "overhead_us": {name: medians[name] - medians["raw"] for name in medians
                        if name.startswith("phobos/")},
        "target_overhead_us": 20.0,
        "command": " ".join(["python3", "benchmarks/api_call_overhead.py", *(argv or sys.argv[1:])]),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
