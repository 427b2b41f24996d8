"""Speed of the CUDA leaves against anchors measured in the same run, on one GPU.

    python3 benchmarks/leaf_bench.py --out leaf.json

- matmul f32, M = N = K in {4096, 8192, 16384} (examples/matmul.phk, alpha=1, beta=0) against
  cupy.matmul (cuBLAS SGEMM). Tile values: autotuned at each size, as @autotune does for a user
  (its on-disk cache is keyed by the dims).
- flash attention f32, D = 64, Nq = Nk in {4096, 16384}, full (examples/flash_attention.phk)
  and causal (examples/causal_attention.phk), tuned once on one head at the largest size and
  reused for the others, 8 heads: our kernel handles one head, so the 8
  heads are 8 launches, one per CUDA stream so that they can overlap; against torch
  scaled_dot_product_attention f32 on a [1, 8, N, 64] batch.
- add, 2^28 f32 (examples/add.phk) against cupy.add into a preallocated output; bandwidth counts
  two reads and one write.
Every timing: warm-up, then the median of several runs timed with CUDA events. Every result is
checked against the anchor's before it is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_timing import cuda_median_s  # noqa: E402
from compiler.cuda.compiled import compile_kernel  # noqa: E402
from compiler.cuda.launch import function_attributes, launch  # noqa: E402
from compiler.cuda.tuning import autotune  # noqa: E402
from compiler.frontend import binding  # noqa: E402
from compiler.frontend import load as frontend

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TUNING: dict[str, dict] = {}


def median_ms(fn, warmup=2, repeat=7) -> float:
    return cuda_median_s(fn, warmup, repeat) * 1e3


def rel_err(x, y) -> float:
    import cupy

    x, y = x.astype(cupy.float64), y.astype(cupy.float64)
    return float(cupy.linalg.norm(x - y) / cupy.linalg.norm(y))


def attrs(c):
    try:
        return function_attributes(c)
    except Exception as e:  # attributes are informative only
        return {"error": repr(e)}


def kernel(name):
    return frontend.load_file(EXAMPLES / name).kernel()


def tuned(k, dims, log):
    t0 = time.time()
    res = autotune.tune(k, dims, log=None)
    log(
        f"tuned {k.name} at {dims}: {res.best} ({res.best_ms:.3f} ms, {len(res.timings)} points timed, "
        f"{len(res.pruned)} pruned, {time.time() - t0:.1f} s{', cached' if res.cached else ''})"
    )
    TUNING[f"{k.name} {dims}"] = {
        "dims": dims,
        "best": res.best,
        "timings": [[dict(p), ms] for p, ms in res.timings],
        "pruned": [[dict(p), why] for p, why in res.pruned],
    }
    return res.best, time.time() - t0


def bench_matmul(results, log, sizes):
    import cupy

    k = kernel("matmul.phk")
    for n in sizes:
        # tuned at each size, as a user's @autotune is (its cache is keyed by the dims)
        best, tune_s = tuned(k, {"M": n, "N": n, "K": n}, log)
        b = binding.bind(k, {"M": n, "N": n, "K": n}, None, best)
        c = compile_kernel(k, b)
        rng = cupy.random.default_rng(n)
        A = rng.standard_normal((n, n), dtype=cupy.float32)
        B = rng.standard_normal((n, n), dtype=cupy.float32)
        C = cupy.zeros((n, n), cupy.float32)  # beta * C_old with beta = 0 is still NaN on garbage
        ref = cupy.matmul(A, B)
        launch(c, {"A": A, "B": B, "C": C}, {"alpha": 1.0, "beta": 0.0})
        err = rel_err(C, ref)
        reps = 3 if n >= 16384 else 7
        arrays = {"A": A, "B": B, "C": C}
        ours = median_ms(partial(launch, c, arrays, {"alpha": 1.0, "beta": 0.0}), 1, reps)
        anchor = median_ms(partial(cupy.matmul, A, B, out=ref), 1, reps)
        flops = 2.0 * n**3
        row = {
            "what": f"matmul f32 n={n}",
            "tiles": best,
            "ours_ms": ours,
            "anchor_ms": anchor,
            "ours_tflops": flops / ours / 1e9,
            "anchor_tflops": flops / anchor / 1e9,
            "ratio": anchor / ours,
            "rel_err": err,
            "attributes": attrs(c),
            "tune_seconds": tune_s,
        }
        results.append(row)
        log(json.dumps(row))


def per_head_launches(c, tensors, scale: float):
    """A call that launches `c` once per head of the [1, heads, N, D] arrays (Q, K, V, O), each on
    its own stream after the current stream's work and joined back into it, so that the heads
    run side by side as one batched launch would."""
    import cupy

    cq, ck, cv, co = tensors
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(cq.shape[1])]

    def ours():
        cur = cupy.cuda.get_current_stream()
        ev = cupy.cuda.Event()
        ev.record(cur)
        for h, s in enumerate(streams):
            s.wait_event(ev)
            arrays = {"Q": cq[0, h], "K": ck[0, h], "V": cv[0, h], "O": co[0, h]}
            launch(c, arrays, {"scale": scale}, stream=s)
        for s in streams:
            done = cupy.cuda.Event()
            done.record(s)
            cur.wait_event(done)

    return ours


def bench_attention(results, log, sizes, causal):
    import cupy
    import torch
    import torch.nn.functional as F

    name = "causal_attention.phk" if causal else "flash_attention.phk"
    k = kernel(name)
    heads = 8
    # Tuned on one head at the largest size: one launch then has enough CTAs to fill the GPU, as
    # the 8-head batch does; tuning on one small head would favour small row tiles for occupancy.
    big = max(sizes)
    tune_dims = {"N": big} if causal else {"Nq": big, "Nk": big}
    best, tune_s = tuned(k, tune_dims, log)
    scale = 1.0 / 8.0
    for n in sizes:
        dims = {"N": n} if causal else {"Nq": n, "Nk": n}
        b = binding.bind(k, dims, None, best)
        c = compile_kernel(k, b)
        g = torch.Generator(device="cuda").manual_seed(n)
        q, kk, v = (
            torch.randn(1, heads, n, 64, device="cuda", dtype=torch.float32, generator=g) for _ in range(3)
        )
        o = torch.empty_like(q)
        cq, ck, cv, co = (cupy.asarray(t) for t in (q, kk, v, o))
        ours = per_head_launches(c, (cq, ck, cv, co), scale)
        ours()
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(q, kk, v, is_causal=causal, scale=scale)
        err = rel_err(co, cupy.asarray(ref))
        reps = 15 if n <= 4096 else 5  # short runs: more of them for a steady median
        t_ours = median_ms(ours, 2, reps)
        t_ref = median_ms(
            partial(F.scaled_dot_product_attention, q, kk, v, is_causal=causal, scale=scale), 2, reps
        )
        flops = 4.0 * heads * n * n * 64 * (0.5 if causal else 1.0)
        row = {
            "what": f"{'causal' if causal else 'flash'} attention f32 D=64 N={n} heads={heads}",
            "tiles": best,
            "ours_ms": t_ours,
            "anchor_ms": t_ref,
            "ours_tflops": flops / t_ours / 1e9,
            "anchor_tflops": flops / t_ref / 1e9,
            "ratio": t_ref / t_ours,
            "rel_err": err,
            "attributes": attrs(c),
            "tune_seconds": tune_s,
        }
        results.append(row)
        log(json.dumps(row))


def bench_add(results, log):
    import cupy

    n = 2**28
    k = kernel("add.phk")
    best, tune_s = tuned(k, {"N": 1 << 24}, log)
    c = compile_kernel(k, binding.bind(k, {"N": n}, None, best))
    rng = cupy.random.default_rng(7)
    a = rng.standard_normal(n, dtype=cupy.float32)
    b_ = rng.standard_normal(n, dtype=cupy.float32)
    out = cupy.empty_like(a)
    ref = cupy.empty_like(a)
    launch(c, {"a": a, "b": b_, "c": out}, {})
    cupy.add(a, b_, out=ref)
    err = float(cupy.abs(out - ref).max())
    ours = median_ms(lambda: launch(c, {"a": a, "b": b_, "c": out}, {}), 3, 15)
    anchor = median_ms(lambda: cupy.add(a, b_, out=ref), 3, 15)
    nbytes = 3 * 4 * n
    row = {
        "what": "add f32 n=2^28",
        "tiles": best,
        "ours_ms": ours,
        "anchor_ms": anchor,
        "ours_tbps": nbytes / ours / 1e9,
        "anchor_tbps": nbytes / anchor / 1e9,
        "ratio": anchor / ours,
        "max_abs_err": err,
        "tune_seconds": tune_s,
    }
    results.append(row)
    log(json.dumps(row))


JOB_NAMES = ("add", "matmul", "flash", "causal")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default=",".join(JOB_NAMES))
    p.add_argument("--matmul-sizes", default="4096,8192,16384")
    p.add_argument("--attention-sizes", default="4096,16384")
    args = p.parse_args()
    unknown = set(args.only.split(",")) - set(JOB_NAMES)
    if unknown:  # a misspelt name would otherwise run nothing and say nothing
        p.error(f"--only: unknown {', '.join(sorted(unknown))} (choose from {', '.join(JOB_NAMES)})")
    import cupy

    results: list[dict] = []
    props = cupy.cuda.runtime.getDeviceProperties(0)

    def log(msg):
        print(msg, flush=True)

    def save():
        Path(args.out).write_text(
            json.dumps(
                {
                    "gpu": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                    "results": results,
                    "tuning": TUNING,
                },
                indent=1,
            )
        )

    only = args.only.split(",")
    jobs = [
        ("add", lambda: bench_add(results, log)),
        ("matmul", lambda: bench_matmul(results, log, [int(x) for x in args.matmul_sizes.split(",")])),
        (
            "flash",
            lambda: bench_attention(results, log, [int(x) for x in args.attention_sizes.split(",")], False),
        ),
        (
            "causal",
            lambda: bench_attention(results, log, [int(x) for x in args.attention_sizes.split(",")], True),
        ),
    ]
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
                f"  {r['what']:<50} ratio {r['ratio']:.3f}  ours {r['ours_ms']:.3f} ms"
                f"  anchor {r['anchor_ms']:.3f} ms"
            )
        else:
            print(f"  {r['what']:<50} ERROR {r.get('error')}")


if __name__ == "__main__":
    main()
