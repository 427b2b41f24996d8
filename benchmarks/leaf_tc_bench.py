"""Speed of the tensor-core leaves against anchors measured in the same run, on one GPU.

    python3 benchmarks/leaf_tc_bench.py --out leaf-tc.json --latest leaf-latest.json

- matmul bf16 (examples/matmul_bf16.phk), M = N = K in {4096, 8192, 16384}, C in f32, against
  torch.matmul bf16 (cuBLAS) and a Triton matmul written for this comparison
  (benchmarks/triton_peers.py). Our tile values and code-generator schedule (warp layout,
  pipeline depth, CTA order, TMA ring) are tuned at 8192 and reused for the other sizes; f16 likewise.
- matmul TF32 (examples/matmul_tf32.phk, `precision = tf32`) against torch.matmul f32 with TF32
  allowed and the Triton matmul on f32 (TF32 dots).
- attention: examples/mha_bf16.phk and causal_mha_bf16.phk (D in {64, 128}) and mha_tf32.phk
  (D = 64), 8 heads in one launch, N in {4096, 16384}, against torch SDPA on [1, 8, N, D] in the
  same type (f32 for TF32) and a Triton flash attention written for this comparison. Tuned at
  each N (tile values and schedule), as `@autotune` is for a user at that size.
--only picks jobs: matmul, matmul_f16, matmul_tf32, attention (bf16; or one half of it:
attention_full, attention_causal), attention_tf32; --attention-d picks the bf16 head sizes.
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
from compiler.cuda.compiled import compile_kernel  # noqa: E402
from compiler.cuda.launch import function_attributes, launch  # noqa: E402
from compiler.cuda.tuning import autotune  # noqa: E402
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


def tune(k, dims, log, label=None):
    """The library's tuner (compiler/cuda/tuning/autotune.py): for tensor-core kernels it searches the
    tile values and the code generator's schedule (warp layout or warpgroup MMA, pipeline depth,
    CTA order)."""
    t0 = time.time()
    res = autotune.tune(k, dims, use_cache=False)
    log(
        f"tuned {k.name} at {dims}: {res.best} {res.schedule} ({res.best_ms:.3f} ms; "
        f"{len(res.timings)} timed, {len(res.pruned)} pruned, {time.time() - t0:.1f} s)"
    )
    TUNING[label or k.name] = {
        "dims": dims,
        "best": res.best,
        "schedule": str(res.schedule),
        "timings": [[dict(p), ms] for p, ms in res.timings],
        "pruned": [[dict(p), why] for p, why in res.pruned],
    }
    return res.best, res.schedule


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
    best, schedule = tune(k, {"M": tune_n, "N": tune_n, "K": tune_n}, log)
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
    """One multi-head example (H = 8 heads on grid y, one launch) against torch SDPA on
    [1, 8, N, D] in the same type (f32 for the TF32 example, TF32 not allowed) and the Triton
    flash attention."""
    import torch
    import torch.nn.functional as F

    from benchmarks import triton_peers

    k = kernel(name)
    heads = 8
    storage = next(p.dtype for p in k.tensors if p.name == "Q")
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[storage]
    label = "tf32" if storage == "f32" else storage
    scale = d**-0.5
    torch.backends.cuda.matmul.allow_tf32 = False
    for n in sizes:
        # tuned at each N, as a user's @autotune is (its cache is keyed by the dims): the best
        # schedule at 16384 (one CTA per SM) leaves SMs idle at 4096
        best, schedule = tune(k, {"H": heads, "N": n, "D": d}, log, f"{k.name} D={d} N={n}")
        c = compile_kernel(k, binding.bind(k, {"H": heads, "N": n, "D": d}, None, best), schedule=schedule)
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q, kk, v = (torch.randn(heads, n, d, device="cuda", generator=g).to(tdtype) for _ in range(3))
        o = torch.full((heads, n, d), float("nan"), device="cuda").to(tdtype)
        arrays = {"Q": as_cupy(q), "K": as_cupy(kk), "V": as_cupy(v), "O": as_cupy(o)}
        launch(c, arrays, {"scale": scale})
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(
            *(x[None].double() for x in (q, kk, v)), is_causal=causal, scale=scale
        )[0]
        err = rel_err(o, ref)
        tri = torch.empty_like(q)
        triton_peers.attention(q, kk, v, tri, scale, causal)
        err_tri = rel_err(tri, ref)
        ours = median_ms(lambda c=c, arrays=arrays: launch(c, arrays, {"scale": scale}), 2, 7)
        batch = (q[None], kk[None], v[None])
        opts = {"is_causal": causal, "scale": scale}
        sdpa = median_ms(lambda b=batch, o=opts: F.scaled_dot_product_attention(*b, **o), 2, 7)
        triton_ms = median_ms(lambda a=(q, kk, v, tri), c=causal: triton_peers.attention(*a, scale, c), 2, 7)
        flops = 4.0 * heads * n * n * d * (0.5 if causal else 1.0)
        what = f"attention D={d} N={n}{' causal' if causal else ''}"
        extra = {"rel_err": err, "tiles": best, "schedule": str(schedule), "kernel": k.name}
        extra["attributes"] = function_attributes(c)
        for r in (
            row(what, label, ours, f"torch SDPA {storage}", sdpa, flops, **extra),
            row(what, label, ours, "triton", triton_ms, flops, rel_err=err, triton_rel_err=err_tri),
        ):
            results.append(r)
            log(json.dumps(r))


def bench_matmul_tf32(results, log, sizes):
    """examples/matmul.phk (alpha = 1, beta = 0) with the TF32 opt-in, against torch.matmul f32
    with TF32 allowed (cuBLAS) and the Triton matmul on f32 (its dots are TF32 by default)."""
    import torch

    from benchmarks import triton_peers

    k = kernel("matmul_tf32.phk")
    best, schedule = tune(k, {"M": 4096, "N": 4096, "K": 4096}, log)
    torch.backends.cuda.matmul.allow_tf32 = True
    for n in sizes:
        c = compile_kernel(k, binding.bind(k, {"M": n, "N": n, "K": n}, None, best), schedule=schedule)
        g = torch.Generator(device="cuda").manual_seed(n)
        a, b = (torch.randn(n, n, device="cuda", generator=g) for _ in range(2))
        out = torch.zeros(n, n, device="cuda")
        arrays = {"A": as_cupy(a), "B": as_cupy(b), "C": as_cupy(out)}
        scal = {"alpha": 1.0, "beta": 0.0}
        launch(c, arrays, scal)
        torch.cuda.synchronize()
        ref = torch.matmul(a.double(), b.double())
        err = rel_err(out, ref)
        tri = torch.empty_like(out)
        triton_peers.matmul(a, b, tri)
        reps = 5 if n >= 16384 else 10
        ours = median_ms(lambda c=c, arrays=arrays, scal=scal: launch(c, arrays, scal), 2, reps)
        cublas = median_ms(lambda a=a, b=b: torch.matmul(a, b), 2, reps)
        triton_ms = median_ms(lambda a=a, b=b, tri=tri: triton_peers.matmul(a, b, tri), 2, reps)
        flops = 2.0 * n**3
        extra = {"rel_err": err, "tiles": best, "schedule": str(schedule)}
        extra["attributes"] = function_attributes(c)
        for r in (
            row(
                f"matmul n={n}",
                "tf32",
                ours,
                "torch.matmul f32, TF32 allowed (cuBLAS)",
                cublas,
                flops,
                **extra,
            ),
            row(
                f"matmul n={n}",
                "tf32",
                ours,
                "triton",
                triton_ms,
                flops,
                rel_err=err,
                triton_rel_err=rel_err(tri, ref),
            ),
        ):
            results.append(r)
            log(json.dumps(r))
    torch.backends.cuda.matmul.allow_tf32 = False


def jobs_of(args, results: list[dict], log) -> list[tuple[set[str], object]]:
    """The benchmarks to run, each with the --only names that select it."""
    sizes = [int(x) for x in args.matmul_sizes.split(",")]
    att_sizes = [int(x) for x in args.attention_sizes.split(",")]
    jobs = [
        ({"matmul"}, lambda: bench_matmul(results, log, sizes, "bf16", 8192)),  # tuned where the target is
        ({"matmul_f16"}, lambda: bench_matmul(results, log, [8192], "f16", 8192)),
        ({"matmul_tf32"}, lambda: bench_matmul_tf32(results, log, sizes)),
    ]
    heads_d = tuple(int(x) for x in args.attention_d.split(","))
    cases = (("mha_bf16.phk", heads_d), ("causal_mha_bf16.phk", heads_d), ("mha_tf32.phk", (64,)))
    for ex, dims in cases:
        for d in dims:
            causal = ex.startswith("causal")
            # bf16 attention: "attention", or one half of it ("attention_full", "attention_causal")
            half = "attention_causal" if causal else "attention_full"
            names = {"attention_tf32"} if "tf32" in ex else {"attention", half}
            jobs.append(
                (names, lambda ex=ex, d=d, c=causal: bench_attention(results, log, ex, att_sizes, d, c))
            )
    return jobs


def save(args, results: list[dict], gpu: str) -> None:
    """Everything to --out, the rows with a ratio to --latest (written after every job)."""
    doc = {"gpu": gpu, "peak_bf16_tflops": PEAK_BF16_TFLOPS, "results": results, "tuning": TUNING}
    Path(args.out).write_text(json.dumps(doc, indent=1, default=str))
    if args.latest:
        keys = ("what", "dtype", "ours_tflops", "anchor", "anchor_tflops", "ratio")
        rows = [{k: r[k] for k in keys} for r in results if "ratio" in r]
        Path(args.latest).write_text(json.dumps(rows, indent=1))


def print_summary(results: list[dict]) -> None:
    print("\nsummary")
    for r in results:
        if "ratio" in r:
            print(
                f"  {r['what']:<32} {r['dtype']:<5} ours {r['ours_tflops']:7.1f} TFLOP/s  "
                f"{r['anchor']:<22} {r['anchor_tflops']:7.1f}  ratio {r['ratio']:.3f}"
            )
        else:
            print(f"  {r['what']:<32} ERROR {r.get('error')}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--latest", default=None)
    p.add_argument("--only", default="matmul,matmul_f16,attention,matmul_tf32,attention_tf32")
    p.add_argument("--matmul-sizes", default="4096,8192,16384")
    p.add_argument("--attention-sizes", default="4096,16384")
    p.add_argument("--attention-d", default="64,128", help="head sizes of the bf16 attention jobs")
    args = p.parse_args()
    known = set().union(*(names for names, _ in jobs_of(args, [], print)))  # the jobs are not run here
    unknown = set(args.only.split(",")) - known
    if unknown:  # a misspelt name would otherwise run nothing and say nothing
        p.error(f"--only: unknown {', '.join(sorted(unknown))} (choose from {', '.join(sorted(known))})")
    import torch

    results: list[dict] = []

    def log(msg):
        print(msg, flush=True)

    only = set(args.only.split(","))
    for names, job in jobs_of(args, results, log):
        if names & only:
            name = sorted(names)[0]
            try:
                job()
            except Exception as e:  # keep the other benchmarks' numbers; report the failure
                import traceback

                traceback.print_exc()
                results.append({"what": name, "error": repr(e)})
            save(args, results, torch.cuda.get_device_name())
    print_summary(results)


if __name__ == "__main__":
    main()
