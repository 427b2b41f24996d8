"""Speed of the tensor-core leaves against anchors measured in the same run, on one GPU.

    python3 benchmarks/leaf_tc_bench.py --out leaf-tc.json --latest leaf-latest.json

- matmul bf16 (examples/matmul_bf16.phk), M = N = K in {4096, 8192, 16384}, C in f32, against
  torch.matmul bf16 (cuBLAS) and a Triton matmul written for this comparison
  (benchmarks/triton_peers.py). Our tile values and code-generator schedule (warp layout,
  pipeline depth, CTA order) are tuned at 4096 and reused for the larger sizes; f16 likewise at 8192.
- attention bf16 (the *_bf16.phk attention examples, when present), [8, N, D] heads in one
  launch, D in {64, 128}, N in {4096, 16384}, full and causal, against torch SDPA bf16 on
  [1, 8, N, D] and a Triton flash attention.
Rows of --latest: {what, dtype, ours_tflops, anchor, anchor_tflops, ratio}, ratio = anchor time /
our time. Every result is checked against the anchor before it is timed; every timing is the
median of several runs timed with CUDA events after warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_timing import cuda_median_s  # noqa: E402
from compiler.cuda import autotune, compile_kernel  # noqa: E402
from compiler.cuda.launch import function_attributes, launch  # noqa: E402
from compiler.cuda.schedule import DEFAULT, tensor_core_space  # noqa: E402
from compiler.frontend import binding  # noqa: E402
from compiler.frontend import load as frontend  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PEAK_BF16_TFLOPS = 989.0  # H100/H200 SXM dense bf16 / f16 tensor-core rate (datasheet)
TUNING: dict[str, dict] = {}


def median_ms(fn, warmup=2, repeat=7) -> float:
    return cuda_median_s(fn, warmup, repeat) * 1e3


def rel_err(x, y) -> float:
    import torch

    x, y = x.double(), y.double()
    return float(torch.linalg.norm(x - y) / torch.linalg.norm(y))


def kernel(name):
    return frontend.load_file(EXAMPLES / name).kernel()


def as_cupy(t):
    """A torch tensor as the cupy array our launch takes (16-bit types as their bit patterns)."""
    import cupy
    import torch

    if t.dtype in (torch.bfloat16,):
        t = t.view(torch.int16)
    return cupy.asarray(t)


def tune_two_phases(k, dims, log):
    """Tile values with the default schedule, then the schedule space at the best tile values."""
    t0 = time.time()
    first = autotune.tune(k, dims)
    second = autotune.tune(k, dims, points=[first.best], schedules=tensor_core_space(8) + [DEFAULT])
    log(
        f"tuned {k.name} at {dims}: {first.best} {second.schedule} ({second.best_ms:.3f} ms; "
        f"{len(first.timings) + len(second.timings)} timed, {len(first.pruned) + len(second.pruned)} pruned, "
        f"{time.time() - t0:.1f} s)"
    )
    TUNING[k.name] = {
        "dims": dims,
        "best": first.best,
        "schedule": str(second.schedule),
        "timings": [[dict(p), ms] for p, ms in first.timings + second.timings],
        "pruned": [[dict(p), why] for p, why in first.pruned + second.pruned],
    }
    return first.best, second.schedule


def row(what, dtype, ours_ms, anchor, anchor_ms, flops, **extra):
    return {
        "what": what,
        "dtype": dtype,
        "ours_tflops": flops / ours_ms / 1e9,
        "anchor": anchor,
        "anchor_tflops": flops / anchor_ms / 1e9,
        "ratio": anchor_ms / ours_ms,
        "ours_ms": ours_ms,
        "anchor_ms": anchor_ms,
        **extra,
    }


def bench_matmul(results, log, sizes, dtype_name, tune_n):
    import torch

    from benchmarks import triton_peers

    k = kernel(f"matmul_{dtype_name}.phk")
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    best, schedule = tune_two_phases(k, {"M": tune_n, "N": tune_n, "K": tune_n}, log)
    for n in sizes:
        c = compile_kernel(k, binding.bind(k, {"M": n, "N": n, "K": n}, None, best), schedule=schedule)
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, device="cuda", generator=g).to(tdtype)
        b = torch.randn(n, n, device="cuda", generator=g).to(tdtype)
        out = torch.full((n, n), float("nan"), device="cuda")
        arrays = {"A": as_cupy(a), "B": as_cupy(b), "C": as_cupy(out)}
        launch(c, arrays, {})
        torch.cuda.synchronize()
        ref = torch.matmul(a.float(), b.float())
        err = rel_err(out, ref)
        tri = torch.empty_like(out)
        triton_peers.matmul(a, b, tri)
        err_tri = rel_err(tri, ref)
        reps = 5 if n >= 16384 else 10
        ours = median_ms(lambda c=c, arrays=arrays: launch(c, arrays, {}), 2, reps)
        cublas = median_ms(lambda a=a, b=b: torch.matmul(a, b), 2, reps)
        triton_ms = median_ms(lambda a=a, b=b, tri=tri: triton_peers.matmul(a, b, tri), 2, reps)
        flops = 2.0 * n**3
        extra = {
            "rel_err": err,
            "tiles": best,
            "schedule": str(schedule),
            "attributes": function_attributes(c),
        }
        for r in (
            row(f"matmul n={n}", dtype_name, ours, "torch.matmul (cuBLAS)", cublas, flops, **extra),
            row(
                f"matmul n={n}",
                dtype_name,
                ours,
                "triton",
                triton_ms,
                flops,
                rel_err=err,
                triton_rel_err=err_tri,
            ),
        ):
            results.append(r)
            log(json.dumps(r))


def bench_attention(results, log, name, sizes, d, causal):
    import torch
    import torch.nn.functional as F

    from benchmarks import triton_peers

    k = kernel(name)
    heads = 8
    dim_names = {p for p in binding.kernel_dims(k)}
    big = max(sizes)

    def dims_for(n):
        out = {"D": d}
        for key in ("N", "Nq", "Nk"):
            if key in dim_names:
                out[key] = n
        if "H" in dim_names:
            out["H"] = heads
        return {key: v for key, v in out.items() if key in dim_names}

    best = autotune.tune(k, dims_for(big)).best
    TUNING[f"{k.name} D={d}"] = {"best": best}
    scale = d**-0.5
    for n in sizes:
        c = compile_kernel(k, binding.bind(k, dims_for(n), None, best))
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q, kk, v = (torch.randn(heads, n, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
        o = torch.full((heads, n, d), float("nan"), device="cuda")
        arrays = {"Q": as_cupy(q), "K": as_cupy(kk), "V": as_cupy(v), "O": as_cupy(o)}
        launch(c, arrays, {"scale": scale})
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(
            q[None].float(), kk[None].float(), v[None].float(), is_causal=causal, scale=scale
        )[0]
        err = rel_err(o, ref)
        tri = torch.empty_like(q)
        triton_peers.attention(q, kk, v, tri, scale, causal)
        err_tri = rel_err(tri.float(), ref)
        ours = median_ms(lambda c=c, arrays=arrays: launch(c, arrays, {"scale": scale}), 2, 7)
        batch = (q[None], kk[None], v[None])
        sdpa = median_ms(
            lambda b=batch, c=causal: F.scaled_dot_product_attention(*b, is_causal=c, scale=scale), 2, 7
        )
        triton_ms = median_ms(lambda a=(q, kk, v, tri), c=causal: triton_peers.attention(*a, scale, c), 2, 7)
        flops = 4.0 * heads * n * n * d * (0.5 if causal else 1.0)
        what = f"attention D={d} N={n}{' causal' if causal else ''}"
        extra = {"rel_err": err, "tiles": best, "attributes": function_attributes(c), "kernel": k.name}
        for r in (
            row(what, "bf16", ours, "torch SDPA", sdpa, flops, **extra),
            row(what, "bf16", ours, "triton", triton_ms, flops, rel_err=err, triton_rel_err=err_tri),
        ):
            results.append(r)
            log(json.dumps(r))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--latest", default=None)
    p.add_argument("--only", default="matmul,matmul_f16,attention")
    p.add_argument("--matmul-sizes", default="4096,8192,16384")
    p.add_argument("--attention-sizes", default="4096,16384")
    args = p.parse_args()
    import torch

    results: list[dict] = []

    def log(msg):
        print(msg, flush=True)

    def save():
        doc = {
            "gpu": torch.cuda.get_device_name(),
            "peak_bf16_tflops": PEAK_BF16_TFLOPS,
            "results": results,
            "tuning": TUNING,
        }
        Path(args.out).write_text(json.dumps(doc, indent=1, default=str))
        if args.latest:
            keys = ("what", "dtype", "ours_tflops", "anchor", "anchor_tflops", "ratio")
            rows = [{k: r[k] for k in keys} for r in results if "ratio" in r]
            Path(args.latest).write_text(json.dumps(rows, indent=1))

    only = args.only.split(",")
    sizes = [int(x) for x in args.matmul_sizes.split(",")]
    att_sizes = [int(x) for x in args.attention_sizes.split(",")]
    jobs = [
        ("matmul", lambda: bench_matmul(results, log, sizes, "bf16", 4096)),
        ("matmul_f16", lambda: bench_matmul(results, log, [8192], "f16", 8192)),
    ]
    for ex in ("flash_attention_bf16.phk", "causal_attention_bf16.phk"):
        if (EXAMPLES / ex).exists():
            for d in (64, 128):
                jobs.append(
                    (
                        "attention",
                        lambda ex=ex, d=d: bench_attention(
                            results, log, ex, att_sizes, d, ex.startswith("causal")
                        ),
                    )
                )
    for name, job in jobs:
        if name in only:
            try:
                job()
            except Exception as e:  # keep the other benchmarks' numbers; report the failure
                import traceback

                traceback.print_exc()
                results.append({"what": name, "error": repr(e)})
            save()
    print("\nsummary")
    for r in results:
        if "ratio" in r:
            print(
                f"  {r['what']:<32} {r['dtype']:<5} ours {r['ours_tflops']:7.1f} TFLOP/s  "
                f"{r['anchor']:<22} {r['anchor_tflops']:7.1f}  ratio {r['ratio']:.3f}"
            )
        else:
            print(f"  {r['what']:<32} ERROR {r.get('error')}")


if __name__ == "__main__":
    main()
