"""Long-context GQA decode and split-K matmul at the HBM's speed (issue 33), on one GPU, in one run:

    decode   G query rows sharing one KV head (D = 128), S keys, bf16 or f32 KV: phobos (the
             split-loop the cost model chooses, through phobos.Kernel on torch tensors), the
             split-KV Triton kernel of benchmarks/triton_decode.py and torch SDPA on the same
             tensors. Figure: GB/s of KV read (2 S D bytes-per-element / time) and its fraction of
             the HBM bandwidth, both as a device-to-device copy measures it in this run (read +
             written bytes / time) and as the device's properties give it (memory clock x bus).
    split-K  C = A B, M = N = 256, K = 2^20, f32: phobos (split over CTAs) against cuBLAS
             (torch.matmul, which splits K itself); TFLOP/s.

    python benchmarks/decode.py --out results/decode   [--g 1,8,16,32] [--log2s 16,...,22]
        [--dtypes bf16,f32] [--quick]       writes results/decode.json and results/decode.md
    PHOBOS_DECODE_OUT=results/decode python benchmarks/decode.py     (the same, path from the env)
    PYTHONPATH=. pytest benchmarks/decode.py --benchmark-only        (pytest-benchmark: one case)

Each phobos case is compiled before it is timed (Kernel.prepare_gpu, several at once), with BS
tried in BS_CHOICES and the faster kept (a two-point tune; @autotune itself would time every
point on the unsplit loop). Each figure is the median of CUDA-event timings (gpu_timing.py).
Each output is checked against an f32 torch reference before it is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode_kernel import decode_text  # noqa: E402
from benchmarks.gpu_timing import cuda_median_s  # noqa: E402

D = 128
BS_CHOICES = (64, 128)
SPLITK = """
@autotune(BM in [64], BN in [64], BK in [32])
kernel splitk(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {
  let r = ctx.block.y * BM
  let c = ctx.block.x * BN
  var acc: tile<f32>[BM, BN] = 0.0
  for k in range(0, K, BK) {
    acc += dot(A[r :+ BM, k :+ BK], B[k :+ BK, c :+ BN])
  }
  C[r :+ BM, c :+ BN] = acc
}
"""


def decode_kernel(g: int, dtype: str, bs: int):
    import phobos

    text = decode_text(dtype, g, str(bs))  # examples/decode/gqa_decode.phk, KV in `dtype`
    # one point: nothing to tune (the tuner would time it unsplit, one CTA over all of S)
    return phobos.from_source(text, filename=f"<decode G={g}>").bind(autotune=False)


def device_info() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    import cupy

    attrs = cupy.cuda.Device(0).attributes
    spec = 2 * attrs["MemoryClockRate"] * 1e3 * attrs["GlobalMemoryBusWidth"] / 8 / 1e9  # GB/s, DDR
    return {"name": props.name, "sms": props.multi_processor_count, "spec_gbs": spec}


def copy_gbs() -> float:
    """HBM bandwidth as a device-to-device copy of 2 GiB reaches it: (read + written) / time."""
    import torch

    n = 1 << 29  # f32 elements: 2 GiB each way
    src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = cuda_median_s(lambda: dst.copy_(src), warmup=3, repeat=9)
    return 2 * n * 4 / t / 1e9


def _tensors(g: int, s: int, dtype: str, seed: int):
    import torch

    dt = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((g, D), generator=gen, device="cuda").to(dt)
    k = torch.randn((s, D), generator=gen, device="cuda").to(dt)
    v = torch.randn((s, D), generator=gen, device="cuda").to(dt)
    return q, k, v


def _reference(q, k, v, scale: float):
    import torch

    out = torch.empty((q.shape[0], D), dtype=torch.float32, device="cuda")
    rows = 8  # the f32 scores of a few rows at a time: G x S f32 would not fit at S = 2^22
    for r in range(0, q.shape[0], rows):
        scores = (q[r:r + rows].float() @ k.float().T) * scale
        out[r:r + rows] = torch.softmax(scores, dim=1) @ v.float()
    return out


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def bench_decode(g: int, dtype: str, s: int, phobos_kernels: dict, hbm: float, info: dict,
                 quick: bool) -> dict:
    import torch

    from benchmarks.triton_decode import SplitKV

    scale = 1.0 / math.sqrt(D)
    q, k, v = _tensors(g, s, dtype, seed=s + g)
    kv_bytes = 2 * s * D * k.element_size()
    ref = _reference(q, k, v, scale)
    tol = 2e-2 if dtype == "bf16" else 1e-4
    out = torch.empty((g, D), dtype=torch.float32, device="cuda")
    row = {"what": "decode", "G": g, "S": s, "log2S": int(math.log2(s)), "kv": dtype, "kv_bytes": kv_bytes}

    best = None
    for bs, kern in phobos_kernels.items():
        out.fill_(float("nan"))
        kern(q, k, v, out, scale)
        err = _rel(out, ref)
        assert err < tol, (g, dtype, s, bs, err)
        t = cuda_median_s(lambda kern=kern: kern(q, k, v, out, scale))
        launch = next(iter(kern._launches.values()))
        chunks = launch.parts[0].grid[1] if hasattr(launch, "parts") else 1
        if best is None or t < best[0]:
            best = (t, bs, chunks, err)
    t, bs, chunks, err = best
    row |= {"phobos_s": t, "phobos_BS": bs, "phobos_chunks": chunks, "phobos_err": err}

    tri_best = None
    sms = info["sms"]
    chunk_choices = (sms, 2 * sms) if quick else (sms, 2 * sms, 4 * sms)
    for chunks in chunk_choices:
        for bn in (64, 128):
            tri = SplitKV(torch, g, D, s, chunks, bn, ieee=dtype == "f32")
            out.fill_(float("nan"))
            tri(q, k, v, out, scale)
            err = _rel(out, ref)
            assert err < tol, ("triton", g, dtype, s, chunks, bn, err)
            tt = cuda_median_s(lambda tri=tri: tri(q, k, v, out, scale))
            if tri_best is None or tt < tri_best[0]:
                tri_best = (tt, tri.chunks, bn)
    row |= {"triton_s": tri_best[0], "triton_chunks": tri_best[1], "triton_BN": tri_best[2]}

    qq, kk, vv = q[None, None], k[None, None], v[None, None]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        row["sdpa_s"] = cuda_median_s(lambda: sdpa(qq, kk, vv, scale=scale), warmup=1, repeat=3)
    except RuntimeError as err:  # out of memory for the math backend's G x S scores
        row["sdpa_s"], row["sdpa_error"] = None, str(err).splitlines()[0]
    for who in ("phobos", "triton", "sdpa"):
        t = row[f"{who}_s"]
        row[f"{who}_gbs"] = kv_bytes / t / 1e9 if t else None
        row[f"{who}_of_copy"] = kv_bytes / t / 1e9 / hbm if t else None
        row[f"{who}_of_spec"] = kv_bytes / t / 1e9 / info["spec_gbs"] if t else None
    row["phobos_over_triton"] = row["triton_s"] / row["phobos_s"]
    return row


def prepare_decode(cases, device: int = 0) -> dict:
    """phobos kernels per (G, dtype, S), one per BS, compiled and loaded ahead, several at once."""
    kernels = {}
    jobs = []
    for g, dtype, s in cases:
        for bs in BS_CHOICES:
            kern = decode_kernel(g, dtype, bs)
            kernels.setdefault((g, dtype, s), {})[bs] = kern
            jobs.append((kern, {"Q": (g, D), "K": (s, D), "V": (s, D), "O": (g, D)}))

    def prepare(job):
        kern, shapes = job
        try:
            kern.prepare_gpu(shapes, device)
            return None
        except Exception as err:  # a point pruned for its shared memory: the other BS is timed
            return kern, str(err).splitlines()[0]

    with ThreadPoolExecutor(8) as pool:
        failed = [f for f in pool.map(prepare, jobs) if f is not None]
    for kern, why in failed:
        print(f"skipped {kern}: {why}", flush=True)
        for per in kernels.values():
            for bs in [b for b, k in per.items() if k is kern]:
                del per[bs]
    return kernels


def bench_splitk(info: dict) -> dict:
    import torch

    import phobos

    m = n = 256
    k = 1 << 20
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn((m, k), generator=gen, device="cuda")
    b = torch.randn((k, n), generator=gen, device="cuda")
    c = torch.empty((m, n), device="cuda")
    kern = phobos.from_source(SPLITK, filename="<split-K>").bind(autotune=False)
    kern(a, b, c)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = torch.matmul(a, b)
    err = _rel(c, ref)
    assert err < 1e-4, err
    t = cuda_median_s(lambda: kern(a, b, c), warmup=1, repeat=5)
    tc = cuda_median_s(lambda: torch.matmul(a, b), warmup=1, repeat=5)
    launch = next(iter(kern._launches.values()))
    flops = 2.0 * m * n * k
    return {"what": "split-K matmul f32", "M": m, "N": n, "K": k, "phobos_s": t, "cublas_s": tc,
            "phobos_tflops": flops / t / 1e12, "cublas_tflops": flops / tc / 1e12,
            "ratio_cublas_over_phobos": tc / t,
            "phobos_chunks": launch.parts[0].grid[2] if hasattr(launch, "parts") else 1, "rel_err": err,
            "bytes_gbs": (m * k + k * n) * 4 / t / 1e9}


def markdown(result: dict) -> str:
    info = result["device"]
    lines = [f"# decode and split-K on {info['name']} ({info['sms']} SMs)", "",
             f"HBM: copy {result['copy_gbs']:.0f} GB/s (read + write), spec {info['spec_gbs']:.0f} GB/s", "",
             "| G | S | KV | phobos GB/s | of copy | of spec | Triton GB/s | phobos/Triton | SDPA GB/s | "
             "phobos chunks, BS |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["decode"]:
        sdpa = f"{r['sdpa_gbs']:.0f}" if r["sdpa_gbs"] else "-"
        lines.append(f"| {r['G']} | 2^{r['log2S']} | {r['kv']} | {r['phobos_gbs']:.0f} | "
                     f"{r['phobos_of_copy']:.2f} | {r['phobos_of_spec']:.2f} | {r['triton_gbs']:.0f} | "
                     f"{r['phobos_over_triton']:.2f} | {sdpa} | {r['phobos_chunks']}, {r['phobos_BS']} |")
    for r in result.get("splitk", []):
        lines += ["", f"split-K f32 M=N={r['M']} K={r['K']}: phobos {r['phobos_tflops']:.2f} TFLOP/s "
                  f"({r['phobos_chunks']} chunks), cuBLAS {r['cublas_tflops']:.2f} TFLOP/s, "
                  f"cuBLAS/phobos time {r['ratio_cublas_over_phobos']:.2f}"]
    return "\n".join(lines) + "\n"


def run(gs, log2s, dtypes, quick: bool, splitk: bool, out: Path) -> dict:
    info = device_info()
    hbm = copy_gbs()
    print(f"device {info}, copy {hbm:.0f} GB/s", flush=True)
    cases = [(g, dt, 1 << e) for dt in dtypes for g in gs for e in log2s]
    kernels = prepare_decode(cases)
    rows = []
    result = {"device": info, "copy_gbs": hbm, "decode": rows}
    if splitk:  # first: it is one case, and the decode cases may run past a time limit
        result["splitk"] = [bench_splitk(info)]
        print(json.dumps(result["splitk"][0]), flush=True)
    for case in cases:
        if not kernels[case]:
            print(f"no phobos point compiled for {case}", flush=True)
            continue
        row = bench_decode(*case, kernels[case], hbm, info, quick)
        print(json.dumps(row), flush=True)
        rows.append(row)
        write(result, out)  # after every case, so a run cut short still leaves its table
    return result


def write(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(markdown(result))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("PHOBOS_DECODE_OUT"),
                    help="path prefix: writes PREFIX.json and PREFIX.md (default: $PHOBOS_DECODE_OUT)")
    ap.add_argument("--g", default="1,8,16,32")
    ap.add_argument("--log2s", default="16,17,18,19,20,21,22")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--quick", action="store_true", help="fewer Triton chunk counts")
    ap.add_argument("--no-splitk", action="store_true")
    args = ap.parse_args(argv)
    if not args.out:
        ap.error("give --out PREFIX or set PHOBOS_DECODE_OUT")
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    out = Path(args.out)
    result = run(ints(args.g), ints(args.log2s), args.dtypes.split(","), args.quick, not args.no_splitk, out)
    write(result, out)
    print(markdown(result))
    return 0


# ---- pytest-benchmark view (one case), as the other suites -------------------------------------

def _gpu_missing() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except Exception:
        return True


def test_decode_bf16_g16_s2_20_reads_kv_near_hbm_speed(benchmark):
    import pytest

    if _gpu_missing():
        pytest.skip("needs a GPU with torch")
    info = device_info()
    hbm = copy_gbs()
    case = (16, "bf16", 1 << 20)
    row = bench_decode(*case, prepare_decode([case])[case], hbm, info, quick=True)
    kern = decode_kernel(16, "bf16", row["phobos_BS"])
    q, k, v = _tensors(16, 1 << 20, "bf16", seed=1)
    out = q.new_empty((16, D), dtype=__import__("torch").float32)
    benchmark(lambda: (kern(q, k, v, out, 1.0 / math.sqrt(D)), __import__("torch").cuda.synchronize()))
    benchmark.extra_info.update(row)


if __name__ == "__main__":
    raise SystemExit(main())
