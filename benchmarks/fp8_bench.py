"""fp8 GEMM against torch._scaled_mm (cuBLASLt fp8) on one GPU, anchors measured in the same run.

    python3 benchmarks/fp8_bench.py --out fp8.md [--json fp8.json] [--sizes 4096,8192,16384]

examples/matmul_fp8.phk: C = (sa ⊗ sb) ⊙ (A Btᵀ), A [M, K] and Bt [N, K] e4m3 (K-contiguous, as
cuBLASLt's fp8 GEMM wants them: torch._scaled_mm(A, Bt.t())), a scale per row of A and per column
of C (f32), C in bf16; and its per-tensor form (two f32 scalars). Our tile values and schedule
are tuned at --tune-n (the library's tuner over the @autotune points and the warpgroup-MMA
schedules, cp.async and TMA rings, or --full-tune for its whole schedule space); its FINALISTS
best are timed again at every size and the fastest there is the row. Every result is checked
against torch's before it is timed (relative error in the Frobenius norm); every timing is the
fastest of ROUNDS interleaved medians of several runs timed with CUDA events after warm-up. The
table (markdown) goes to --out, written once at the end (atomically); ratio = torch time / our
time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_timing import cuda_median_s  # noqa: E402
from common.atomic import write_atomically  # noqa: E402
from compiler.cuda.compiled import compile_kernel  # noqa: E402
from compiler.cuda.launch import launch  # noqa: E402
from compiler.cuda.schedule import Schedule  # noqa: E402
from compiler.cuda.tuning import autotune  # noqa: E402
from compiler.frontend import binding  # noqa: E402
from compiler.frontend import load as frontend  # noqa: E402
from compiler.frontend.diagnostics import CompileError  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "matmul_fp8.phk"
# the schedules the fp8 dot runs on as fp8 warpgroup MMA (compiler/cuda/fp8.py keeps the others
# on f16): the cp.async ring (depth, CTA order, early or late copies) and the warp-specialized
# TMA ring (a producer warpgroup, no CTA-wide barrier in the loop: the two consumer warpgroups'
# per-k-tile promotions, mainloops/wgmma/fp8_promote.py, need not wait for each other)
WGMMA_SCHEDULES = [Schedule(None, s, order, wgmma=True, late_copies=late)
                   for s in (3, 4, 5, 6) for order in ("row", "grouped") for late in (False, True)]
WGMMA_SCHEDULES += [Schedule(None, s, order, wgmma=True, tma=True)
                    for s in (3, 4, 6) for order in ("row", "grouped")]
# and each of those with the promotion's adds overlapped with the next piece's MMA (fp8_overlap)
WGMMA_SCHEDULES += [dataclasses.replace(s, fp8_overlap=True) for s in WGMMA_SCHEDULES]
# the tuner's best few, timed again where the table times (its data, its size, more runs,
# interleaved): one tuning sample each decided within the GPU's run-to-run spread before (the
# per-tensor form, the same mainloop as the row-wise one, took a CTA order 2% faster in tuning
# that was 15% slower in the table: benchmarks/results/h100-2026-12-07/fp8.log)
FINALISTS = 4
ROUNDS = 3
# what --variants may name beside WGMMA_SCHEDULES: the TMA ring at other depths and with the TMA store
FORCEABLE = WGMMA_SCHEDULES + [Schedule(None, s, order, wgmma=True, tma=True, tma_store=st)
                               for s in (3, 4, 5, 6, 8) for order in ("row", "grouped")
                               for st in (False, True)]


def forced(text: str) -> list[tuple[dict, Schedule]]:
    """--variants: `MxNxK@schedule-key,...` (tile point, schedule), timed as they are, untuned."""
    keys = {s.key(): s for s in FORCEABLE}
    out = []
    for item in text.split(","):
        tiles, key = item.split("@")
        m, n, k = (int(v) for v in tiles.split("x"))
        out.append(({"TILE_M": m, "TILE_N": n, "TILE_K": k}, keys[key]))
    return out


def per_tensor_text() -> str:
    return (EXAMPLE.read_text().replace("SA: tensor<f32>[M], SB: tensor<f32>[N]", "sa: f32, sb: f32")
            .replace("  let sa = SA[pm * TILE_M :+ TILE_M]\n", "")
            .replace("  let sb = SB[pn * TILE_N :+ TILE_N]\n", ""))


def as_cupy(t):
    """A torch tensor as the cupy array our launch takes (bf16 and fp8 as their bits)."""
    import cupy
    import torch

    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    return cupy.asarray(t)


def rel_err(x, y) -> float:
    import torch

    x, y = x.double(), y.double()
    return float(torch.linalg.norm(x - y) / torch.linalg.norm(y))


def tune(kernel, n: int, full: bool, log) -> list[tuple[dict, Schedule]]:
    """The tuner's FINALISTS best (tile point, schedule), best first."""
    t0 = time.time()
    res = autotune.tune(kernel, {"M": n, "N": n, "K": n}, use_cache=False,
                        schedules=None if full else WGMMA_SCHEDULES)
    log(f"tuned {kernel.name} at {n}: {res.best} {res.schedule.key()} ({res.best_ms:.3f} ms; "
        f"{len(res.timings)} timed, {len(res.pruned)} pruned, {time.time() - t0:.1f} s)")
    keys = {s.key(): s for s in WGMMA_SCHEDULES + [res.schedule]}
    ranked = []
    for items, _ms in sorted(res.timings, key=lambda t: t[1]):
        point = {k: v for k, v in items if k != "schedule"}
        schedule = keys.get(dict(items).get("schedule"), res.schedule)
        if (point, schedule) not in ranked:
            ranked.append((point, schedule))
    return ranked[:FINALISTS] or [(res.best, res.schedule)]


def bench_one(kernel, form: str, n: int, finalists, reps: int) -> dict:
    """The best of the tuner's `finalists` at size n against torch._scaled_mm: each checked
    against torch's result first, then all timed in ROUNDS interleaved rounds (with torch), each
    kept at its fastest round's median."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(n)
    a = (torch.randn(n, n, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    bt = (torch.randn(n, n, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if form == "rowwise":
        sa = torch.rand(n, device="cuda", generator=g) + 0.5
        sb = torch.rand(n, device="cuda", generator=g) + 0.5
        arrays, scalars = {"A": as_cupy(a), "Bt": as_cupy(bt), "SA": as_cupy(sa), "SB": as_cupy(sb),
                           "C": as_cupy(c)}, {}
        ta, tb = sa.view(-1, 1), sb.view(1, -1)
    else:
        sa_v, sb_v = 0.75, 1.5
        arrays, scalars = {"A": as_cupy(a), "Bt": as_cupy(bt), "C": as_cupy(c)}, {"sa": sa_v, "sb": sb_v}
        ta, tb = torch.tensor(sa_v, device="cuda"), torch.tensor(sb_v, device="cuda")

    def scaled_mm():
        return torch._scaled_mm(a, bt.t(), scale_a=ta, scale_b=tb, out_dtype=torch.bfloat16)

    ref = scaled_mm()
    runs, errs, kept = [], [], []
    for point, schedule in finalists:
        try:
            compiled = compile_kernel(kernel, binding.bind(kernel, {"M": n, "N": n, "K": n}, None, point),
                                      schedule=schedule)
        except CompileError as e:  # a forced variant the compiler prunes: said, not timed
            print(f"skipped {point} {schedule.key()}: {e}", flush=True)
            continue
        kept.append((point, schedule))
        c.fill_(float("nan"))
        launch(compiled, arrays, scalars)
        torch.cuda.synchronize()
        errs.append(rel_err(c, ref))
        runs.append(lambda compiled=compiled: launch(compiled, arrays, scalars))
    ours = [float("inf")] * len(runs)
    theirs = float("inf")
    for _ in range(ROUNDS):
        for i, run in enumerate(runs):
            ours[i] = min(ours[i], cuda_median_s(run, 2, reps) * 1e3)
        theirs = min(theirs, cuda_median_s(scaled_mm, 2, reps) * 1e3)
    best = min(range(len(runs)), key=lambda i: ours[i])
    finalists = kept
    point, schedule = finalists[best]
    flops = 2.0 * n**3
    return {"form": form, "n": n, "ours_ms": ours[best], "torch_ms": theirs,
            "ours_tflops": flops / ours[best] / 1e9, "torch_tflops": flops / theirs / 1e9,
            "ratio": theirs / ours[best], "rel_err": errs[best], "worst_rel_err": max(errs),
            "tiles": point, "schedule": schedule.key(),
            "finalists": [[p, s.key(), ms] for (p, s), ms in zip(finalists, ours, strict=True)]}


def table(gpu: str, rows: list[dict]) -> str:
    head = ("scales", "n", "ours ms", "ours TFLOP/s", "torch ms", "torch TFLOP/s", "ratio", "rel err",
            "tiles", "schedule")
    lines = [f"fp8 GEMM (e4m3, C bf16) on {gpu}: examples/matmul_fp8.phk against torch._scaled_mm", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['form']} | {r['n']} | error: {r['error']} | | | | | | | |")
            continue
        tiles = ", ".join(f"{k}={v}" for k, v in sorted(r["tiles"].items()))
        cells = (r["form"], r["n"], f"{r['ours_ms']:.3f}", f"{r['ours_tflops']:.0f}", f"{r['torch_ms']:.3f}",
                 f"{r['torch_tflops']:.0f}", f"{r['ratio']:.3f}", f"{r['rel_err']:.1e}", tiles, r["schedule"])
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="the markdown table")
    p.add_argument("--json", type=Path, default=None, help="the rows as JSON too")
    p.add_argument("--sizes", default="4096,8192,16384")
    p.add_argument("--tune-n", type=int, default=8192)
    p.add_argument("--forms", default="rowwise,tensor", help="rowwise (per-row/column scales), tensor")
    p.add_argument("--full-tune", action="store_true", help="the tuner's whole schedule space")
    p.add_argument("--variants", default=None, help="MxN@schedule-key,... timed without tuning (forced)")
    args = p.parse_args()
    import torch

    sizes = [int(s) for s in args.sizes.split(",")]
    kernels = {"rowwise": frontend.load_file(EXAMPLE).kernel(),
               "tensor": frontend.load_text(per_tensor_text(), "matmul_fp8_tensor.phk").kernel()}
    rows: list[dict] = []
    for form in args.forms.split(","):
        kernel = kernels[form]
        if args.variants:
            finalists = forced(args.variants)
        else:
            finalists = tune(kernel, args.tune_n, args.full_tune, print)
        for n in sizes:
            try:
                rows.append(bench_one(kernel, form, n, finalists, 5 if n >= 16384 else 10))
            except Exception as e:  # keep the other sizes' numbers; report the failure
                rows.append({"form": form, "n": n, "error": repr(e)})
            print(json.dumps(rows[-1]), flush=True)
    text = table(torch.cuda.get_device_name(), rows)
    write_atomically(args.out, text.encode())
    if args.json:
        write_atomically(args.json, json.dumps(rows, indent=1).encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
