"""The f32 matmul (examples/matmul.phk, the seed's kernel) at chosen (tile point, schedule) pairs
against cuBLAS SGEMM (torch.matmul, TF32 off) in the same process: CUDA events
(benchmarks/gpu_timing.py), the median of alternated rounds, each pair's registers and local
(spill) bytes as the driver reports them, and its relative error against cuBLAS (issue 36's SGEMM
row, one candidate at a time).

    PYTHONPATH=. python3 benchmarks/sgemm_variants.py [--n 8192] [--variants 128x128x8:t256-db,...]

A variant is TILE_MxTILE_NxTILE_K:t<threads>[-db][-grouped]."""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
from pathlib import Path

from benchmarks.gpu_timing import cuda_median_s
from compiler.cuda.schedule import DEFAULT, Schedule

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "matmul.phk"
DEFAULT_VARIANTS = (  # 8 x 8 per thread (the schedules before issue 36), then 8 x 16 or 16 x 8
    "128x128x8:t256", "128x128x8:t256-db", "128x128x16:t256-db",
    "128x128x8:t128-db", "128x128x16:t128-db", "128x128x8:t128-db-grouped",
    "128x256x8:t256-db", "256x128x8:t256-db", "64x128x8:t64-db",
)
ROUNDS = 5  # alternated rounds of (phobos, cuBLAS), each the median of REPS launches
REPS = 5


def parse_variant(text: str) -> tuple[dict[str, int], Schedule]:
    tiles, sched = text.split(":")
    m, n, k = (int(v) for v in tiles.split("x"))
    flags = sched.split("-")
    schedule = dataclasses.replace(
        DEFAULT, threads=int(flags[0][1:]), double_buffer="db" in flags,
        order="grouped" if "grouped" in flags else "row",
    )
    return {"TILE_M": m, "TILE_N": n, "TILE_K": k}, schedule


def main() -> None:
    import cupy
    import torch

    from compiler.cuda.compiled import compile_kernel
    from compiler.cuda.launch import function_attributes, launch
    from compiler.frontend import load as frontend
    from compiler.frontend.binding import bind

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    args = ap.parse_args()
    os.environ["PHOBOS_CUDA_WIDE_BLOCKS"] = "1"  # the 16 x 8 / 8 x 16 blocks (schedule.wide_blocks_searched)
    n = args.n
    kernel = frontend.select_kernel(frontend.load_text(EXAMPLE.read_text()), None)
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.randn(n, n, device="cuda") for _ in range(2))
    c = torch.empty(n, n, device="cuda")
    arrays = {name: cupy.from_dlpack(t) for name, t in (("A", a), ("B", b), ("C", c))}
    scalars = {"alpha": 1.0, "beta": 0.0}
    expected = torch.matmul(a, b)
    print(f"# f32 matmul {n}^3 variants against cuBLAS SGEMM on {torch.cuda.get_device_name()}\n")
    print("| variant | phobos ms | cuBLAS ms | cuBLAS/phobos | TFLOP/s | regs | local bytes | rel err |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for text in args.variants.split(","):
        point, schedule = parse_variant(text)
        try:
            compiled = compile_kernel(kernel, bind(kernel, {"M": n, "N": n, "K": n}, None, point),
                                      schedule=schedule, cc=90)
            attrs = function_attributes(compiled)
        except Exception as e:  # a pruned point or a refused launch: named, not timed
            print(f"| {text} | {type(e).__name__}: {str(e)[:80]} | | | | | | |", flush=True)
            continue

        def ours(compiled=compiled):
            launch(compiled, arrays, scalars)

        ours()
        err = float((c - expected).norm() / expected.norm())
        mine, theirs = [], []
        for _ in range(ROUNDS):
            mine.append(cuda_median_s(ours, warmup=1, repeat=REPS) * 1e3)
            theirs.append(cuda_median_s(lambda: torch.matmul(a, b), warmup=1, repeat=REPS) * 1e3)
        p, t = statistics.median(mine), statistics.median(theirs)
        print(f"| {text} | {p:.3f} | {t:.3f} | {t / p:.3f}x | {2 * n**3 / p / 1e9:.1f} | "
              f"{attrs['num_regs']} | {attrs['local_size_bytes']} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
