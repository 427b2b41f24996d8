"""Per-launch overhead of a GPU pod's leaf launches, against the same function launched solo.

In one process on one GPU: a tiny add leaf (2^20 elements, so the kernel itself takes a few
microseconds) prepared by the pod's GPU backend (pod/backends/backend_gpu.py) exactly as a job prepares it,
then, alternating in rounds so both see the same machine:

- solo: the loaded CUDA function launched with cupy on one stream, synchronized after each launch
  (what a hand-written script pays per launch when it waits for each result);
- backend: `GpuBackend.compute` (stream from the pool, bound arrays, the launch prepared once per
  job and leaf, synchronize) as the pod's compute instruction calls it;
- pod: the same compute chain through a real pod process (submit to `finished`, per instruction),
  from benchmarks/test_pod_transfer.py's per-instruction benchmark when `--pod` is given.

Reported: microseconds per launch (medians over rounds) and backend - solo, the overhead the
issue bounds at 20 us. Needs a GPU:
    python3 benchmarks/launch_overhead.py --out $OUT/launch-overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schemas import capnp_io  # noqa: E402
from schemas.program import Leaf, TensorInfo  # noqa: E402

N = 1 << 20
SOURCE = """
@autotune(BLOCK in [1024])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def program() -> capnp_io.JobProgram:
    leaf = Leaf(name="main", kernel="add", source=SOURCE, dims=(("N", N),), tile_values=(("BLOCK", 1024),),
                grid=(N // 1024,), threads=256, tensors=("a", "b", "c"), scalars=())
    return capnp_io.JobProgram(kernel="add", leaves=(leaf,), scalars=(),
                               tensors=(TensorInfo("a", "f32", (N,), "input"),),
                               leaf_writes=(("main", ("c",)),))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out")
    args = p.parse_args(argv)
    import cupy

    from compiler.cuda.launch import _function
    from pod.backends.backend_gpu import GpuBackend

    backend = GpuBackend(0)
    backend.prepare("bench", program())
    bound = {name: backend.allocate((N,)) for name in "abc"}
    _, compiled = backend._leaves[("bench", "main")]
    fn = _function(compiled)
    stream = cupy.cuda.Stream(non_blocking=True)
    solo_args = (bound["a"], bound["b"], bound["c"])

    def solo() -> None:
        fn(compiled.grid, compiled.block, solo_args, shared_mem=compiled.shared_bytes, stream=stream)
        stream.synchronize()

    def through_backend() -> None:
        backend.compute("bench", "main", bound, {})

    for warm in (solo, through_backend):
        for _ in range(50):
            warm()
    times = {"solo": [], "backend": []}
    for _ in range(args.rounds):
        for name, fn_ in (("solo", solo), ("backend", through_backend)):
            start = time.perf_counter()
            for _ in range(args.launches):
                fn_()
            times[name].append((time.perf_counter() - start) / args.launches * 1e6)
    result = {name: round(statistics.median(ts), 2) for name, ts in times.items()}
    result["backend_minus_solo_us"] = round(result["backend"] - result["solo"], 2)
    result.update(per_round_us=times, launches=args.launches, n=N, load_average=os.getloadavg()[0],
                  device=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
