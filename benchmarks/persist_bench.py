"""The persistent TMA ring (Schedule.persistent, compiler/cuda/mainloops/tma_ws/persistent.py) against
the one-CTA-per-tile TMA ring and torch, in one process on one GPU: bf16 matmul 4096^3 and 8192^3
(f32 out, anchor torch.matmul bf16) and linear + bias + ReLU bf16 out 8192^3 (anchor torch's unfused
addmm + relu). Every schedule is forced (no tuner); each row's candidates compile in parallel
processes (tuning/pool.py), then are timed in alternated rounds with the anchor, CUDA events, median.

    PYTHONPATH=. python benchmarks/persist_bench.py [--rows lin8192,mm4096,mm8192] [--quick] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks import gpu_timing

ROUNDS, REPS = 5, 10
POINTS = ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64})


def schedules(sms: int, point: dict):
    """(label, schedule) at `point`: the one-CTA-per-tile TMA ring (the tuner's fastest family so far)
    with and without the TMA store, then the same on a persistent grid of `sms` CTAs; as many
    stages as fit (4 at 128 x 256, 6 at 128 x 128: the ring cuts a deeper ask to the shared memory)."""
    from compiler.cuda.schedule import Schedule

    stages = 4 if point["TILE_N"] == 256 else 6
    out = []
    for ps in (0, sms):
        for st in (False, True):
            label = f"{'persistent' if ps else 'tma'} s{stages}{' tmast' if st else ''}"
            out.append((label, Schedule(None, stages, "grouped", wgmma=True, tma=True, tma_store=st,
                                        persistent=ps)))
    return out


def _row(name: str):
    from benchmarks.issue36_rows import EXAMPLES, LINEAR_BIAS_RELU

    n = int(name[-4:])
    source = LINEAR_BIAS_RELU if name.startswith("lin") else (EXAMPLES / "matmul_bf16.phk").read_text()
    return source, {"M": n, "N": n, "K": n}


def _operands(name: str, dims: dict, torch):
    m, n, k = dims["M"], dims["N"], dims["K"]
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    if name.startswith("lin"):
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        return {"X": a, "W": b, "bias": bias, "Y": y}, "Y", lambda: torch.relu(torch.addmm(bias, a, b))
    c = torch.empty(m, n, device="cuda", dtype=torch.float32)
    return {"A": a, "B": b, "C": c}, "C", lambda: torch.matmul(a, b)


def _cupy_view(t, cupy):
    """A cupy array over torch tensor `t`'s memory (16-bit floats as their bit patterns)."""
    import torch

    if t.dtype == torch.bfloat16:
        return cupy.asarray(t.view(torch.int16)).view(cupy.uint16)
    return cupy.asarray(t)


def _ms(fn, torch) -> float:
    return gpu_timing.events_ms(fn, torch, REPS)


def bench_row(name: str, sms: int, cc: int, points=POINTS) -> list[str]:
    import cupy
    import torch

    from compiler.cuda.launch import launch
    from compiler.cuda.tuning import pool
    from compiler.frontend import load as frontend

    source, dims = _row(name)
    kernel = frontend.select_kernel(frontend.load_text(source), None)
    cands = [(p, label, s) for p in points for label, s in schedules(sms, p)]
    built = pool.build_all([(kernel, dims, p, s, False, cc) for p, _, s in cands])
    tensors, out, anchor = _operands(name, dims, torch)
    arrays = {k: _cupy_view(v, cupy) for k, v in tensors.items()}
    expected = anchor().float()
    rows = []
    for (point, label, _), (compiled, why) in zip(cands, built, strict=True):
        tile = f"{point['TILE_M']}x{point['TILE_N']}"
        if compiled is None:
            rows.append(f"| {name} | {tile} | {label} | pruned: {why.splitlines()[0][:90]} | | | |")
            continue
        def run(c=compiled):
            launch(c, arrays, {})

        tensors[out].zero_()
        run()
        torch.cuda.synchronize()
        err = float((tensors[out].float() - expected).norm() / expected.norm())
        ours, theirs = [], []
        for _ in range(ROUNDS):
            ours.append(_ms(run, torch))
            theirs.append(_ms(anchor, torch))
        mine, ref = statistics.median(ours), statistics.median(theirs)
        flops = 2.0 * dims["M"] * dims["N"] * dims["K"]
        rows.append(f"| {name} | {tile} | {label} | {mine:.4f} | {ref:.4f} | {ref / mine:.3f}x | "
                    f"{flops / mine / 1e9:.0f} | {err:.1e} | {compiled.grid[0]}x{compiled.grid[1]} "
                    f"{compiled.shared_bytes // 1024} KB |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="lin8192,mm4096,mm8192")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="the 128 x 256 tile only")
    args = parser.parse_args(argv)
    import cupy
    import torch

    from compiler.cuda import target

    sms = int(cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"])
    cc = target.device_capability()
    lines = [f"# persistent TMA ring on {torch.cuda.get_device_name()} ({sms} SMs)", "",
             "| row | tile | schedule | ms | anchor ms | anchor/ours | GFLOP/s | rel err | grid, smem |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name in args.rows.split(","):
        lines += bench_row(name, sms, cc, POINTS[:1] if args.quick else POINTS)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
