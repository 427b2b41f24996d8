"""Long-context GQA decode and split-K matmul at the HBM's speed (issue 33), on one GPU, in one run:

    decode   G query rows sharing one KV head (D = 128), S keys, bf16 or f32 KV: phobos (the
             split-loop, through phobos.Kernel on torch tensors, in each of --variants: the merge
             tree's fan-in and the chunks, `Variant`), the split-KV Triton kernel of
             benchmarks/triton_decode.py and torch SDPA on the same tensors. Figure: GB/s of KV
             read (2 S D bytes-per-element / time) and its fraction of the HBM bandwidth, both as
             a device-to-device copy measures it in this run (read + written bytes / time) and as
             the device's properties give it (memory clock x bus). The time is the device's: a
             CUDA graph of calls over copies of the KV that overflow the L2 cache, replayed
             (gpu_timing.graph_median_s); the `eager` figures time one call from Python between
             CUDA events, where the host's launch overhead (~10-20 us) is part of the time.
    split-K  C = A B, M = N = 256, K = 2^20, f32: phobos (split over CTAs) against cuBLAS
             (torch.matmul, which splits K itself); TFLOP/s.

    python benchmarks/decode.py --out results/decode   [--g 1,8,16,32] [--log2s 16,...,22]
        [--dtypes bf16,f32] [--variants fan8,fan0,fan8@2sm] [--bs 64,128] [--quick | --quickest]
        [--no-splitk] [--no-sdpa]            writes results/decode.json and results/decode.md
    bash benchmarks/decode_sweep.sh OUT_DIR      the variants' sweep (about 150 s on an H100)
    PHOBOS_DECODE_OUT=results/decode python benchmarks/decode.py     (the same, path from the env)
    PYTHONPATH=. pytest benchmarks/decode.py --benchmark-only        (pytest-benchmark: one case)

Each phobos case is compiled before it is timed (Kernel.prepare_gpu, several at once), with BS
tried in --bs and the faster kept per variant (a small tune; @autotune itself would time every
point on the unsplit loop). Each figure is a median of CUDA-event timings (gpu_timing.py).
Each output is checked against an f32 torch reference before it is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode_kernel import decode_text  # noqa: E402
from benchmarks.gpu_timing import cuda_median_s, graph_median_s  # noqa: E402

D = 128
BS_CHOICES = (64, 128)
ROTATE = 3  # a graph's KV copies overflow the L2 cache this many times over
DEFAULT_VARIANTS = "fan8+pad16"  # one chunk per SM is the cost model's default now (CTAS_PER_SM)
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


@dataclass(frozen=True)
class Variant:
    """A way to compile the split decode, swept by --variants: the merge tree's fan-in
    (PHOBOS_SPLIT_FAN_IN, compiler/cuda/mainloops/split_loop/tree.py; 0: the combine merges every partial),
    the chunks (None: the cost model's; `per_sm`: that many per SM, forced with split=N), `pad`: the row
    tile BG at least that many rows for 16-bit KV (the kernel's Q rows past G load as zeros and are never
    stored, so that G < 16 runs the tensor-core partial; 0: BG = G), `most`: BG at most that many rows
    (G / BG CTAs along x, each reading all the KV: the L2 serves the second read where they run together;
    0: no limit), `schedule`: the partial kernel's Schedule fields (PHOBOS_SPLIT_SCHEDULE,
    mainloops/split_loop/launch.py partial_schedule), and `one_launch`: the partials merged by the
    partial's own last CTAs, one launch (PHOBOS_SPLIT_ONE_LAUNCH, mainloops/split_loop/fused.py)."""

    name: str
    fan_in: int
    per_sm: int | None = None
    pad: int = 0
    schedule: str = ""
    most: int = 0
    one_launch: bool | None = None  # +one: True, +tree: False, neither: the cost model's choice

    def split(self, sms: int) -> int | None:
        return None if self.per_sm is None else self.per_sm * sms

    def rows(self, g: int, dtype: str) -> int:
        rows = max(g, self.pad) if dtype != "f32" else g
        return min(rows, self.most) if self.most and g % self.most == 0 else rows


# a variant's `+<flag>` suffixes for the partial's schedule: +st<N> ring stages, +t<N> threads,
# +db the CUDA-core dots' double buffer, +late copies issued after the dots (and +bg<N>: Variant.most,
# +one / +tree: Variant.one_launch)
SCHEDULE_FLAGS = {"st": "stages", "t": "threads", "db": "double_buffer", "late": "late_copies"}


def _schedule_field(flag: str) -> str:
    for short, field in sorted(SCHEDULE_FLAGS.items(), key=lambda kv: -len(kv[0])):
        rest = flag[len(short):]
        switch = field in ("double_buffer", "late_copies")
        if flag.startswith(short) and (not rest if switch else rest.isdigit()):
            return f"{field}={rest or 1}"
    raise ValueError


def parse_variants(text: str) -> list[Variant]:
    """`fan8`, `fan0@2sm`, `fan8+pad16`, `fan8@1sm+pad16+st4+t128`: fan<N>[@<K>sm][+pad<R>][+st<N>]
    [+t<N>][+db][+late][+bg<N>][+one|+tree], comma-separated."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        head, *flags = item.split("+")
        fan, _, chunks = head.partition("@")
        try:
            if not fan.startswith("fan") or (chunks and not chunks.endswith("sm")):
                raise ValueError
            pads = [int(f[3:]) for f in flags if f.startswith("pad")]
            most = [int(f[2:]) for f in flags if f.startswith("bg")]
            tuned = [f for f in flags if f not in ("one", "tree") and not f.startswith(("pad", "bg"))]
            if "one" in flags and "tree" in flags:
                raise ValueError
            one = True if "one" in flags else (False if "tree" in flags else None)
            schedule = ",".join(map(_schedule_field, tuned))
            out.append(Variant(item, int(fan[3:]), int(chunks[:-2]) if chunks else None,
                               pads[-1] if pads else 0, schedule, most[-1] if most else 0, one))
        except ValueError:
            raise SystemExit(f"error: --variants: {item!r} is not fan<N>[@<K>sm][+pad<R>][+st<N>][+t<N>]"
                             "[+db][+late][+bg<N>][+one|+tree]") from None
    return out


def decode_kernel(g: int, dtype: str, bs: int, split: int | None = None, bg: int | None = None):
    import phobos

    text = decode_text(dtype, bg or g, str(bs))  # examples/decode/gqa_decode.phk, KV in `dtype`
    # one point: nothing to tune (the tuner would time it unsplit, one CTA over all of S)
    return phobos.from_source(text, filename=f"<decode G={g}>").bind(autotune=False, split=split)


def device_info() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    import cupy

    attrs = cupy.cuda.Device(0).attributes
    spec = 2 * attrs["MemoryClockRate"] * 1e3 * attrs["GlobalMemoryBusWidth"] / 8 / 1e9  # GB/s, DDR
    return {"name": props.name, "sms": props.multi_processor_count, "spec_gbs": spec,
            "l2_bytes": attrs.get("L2CacheSize", 50 << 20)}


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


def _copies(q, k, v, l2_bytes: int) -> list:
    """(q, k, v) and further copies of k and v, enough that one pass over them all overflows the
    L2 cache ROTATE times (each call of a captured graph then reads its KV from HBM)."""
    n = max(1, math.ceil(ROTATE * l2_bytes / (2 * k.numel() * k.element_size())))
    return [(q, k, v)] + [(q, k.clone(), v.clone()) for _ in range(n - 1)]


def _timed(call, copies, out) -> tuple[float, float]:
    """(device time per call from a CUDA graph over the copies, eager time of one call); where
    the capture fails, the eager time twice (the row's `timing` says which)."""
    eager = cuda_median_s(lambda: call(*copies[0], out))
    try:
        return graph_median_s([lambda c=c: call(*c, out) for c in copies]), eager
    except Exception as err:  # noqa: BLE001 - a capture refused: the eager figure stands
        print(f"CUDA graph capture failed, eager time used: {str(err).splitlines()[0]}", flush=True)
        return None, eager


WRONG: list[str] = []  # every variant that gave a wrong result this run: main then exits 1


def _checked(kern, copies, ref, out, scale: float, tol: float, what: str) -> float | None:
    """The relative error of one call against the reference, or None (printed, and kept in WRONG)
    past `tol`."""
    out.fill_(float("nan"))
    kern(*copies[0], out, scale)
    err = _rel(out, ref)
    if not err < tol:  # a wrong variant is reported and left out; the others still run
        print(f"WRONG {what}: relative error {err} (tolerance {tol}); not timed", flush=True)
        WRONG.append(what)
        return None
    return err


def _phobos_rows(kernels: dict, variants, copies, ref, out, scale: float, tol: float) -> dict:
    """Per variant: the best BS by device time, checked against the reference before it is
    timed and once more after (a call that leaves state behind, the one-launch form's tickets,
    would show in the second)."""
    rows = {}
    for variant in variants:
        best = None
        for bs, kern in kernels.get(variant.name, {}).items():
            err = _checked(kern, copies, ref, out, scale, tol, f"{variant.name} BS={bs}")
            if err is None:
                continue
            graph, eager = _timed(lambda q, k, v, o, kern=kern: kern(q, k, v, o, scale), copies, out)
            if _checked(kern, copies, ref, out, scale, tol, f"{variant.name} BS={bs} after timing") is None:
                continue
            launch = next(iter(kern._launches.values()))
            parts = getattr(launch, "parts", (launch,))
            chunks = parts[0].grid[1] if hasattr(launch, "parts") else 1
            t = eager if graph is None else graph
            if best is None or t < best["s"]:
                best = {"s": t, "timing": "eager" if graph is None else "graph", "eager_s": eager, "BS": bs,
                        "chunks": chunks, "launches": len(parts), "err": err}
        if best is not None:
            rows[variant.name] = best
    return rows


def _triton_best(g, dtype, s, copies, ref, out, scale, tol, sms, quick) -> dict | None:
    import torch

    from benchmarks.triton_decode import SplitKV

    best = None
    for chunks in {0: (sms, 2 * sms, 4 * sms), 1: (sms, 2 * sms)}.get(int(quick), (sms,)):
        for bn in (64, 128):
            tri = SplitKV(torch, g, D, s, chunks, bn, ieee=dtype == "f32")
            out.fill_(float("nan"))
            try:
                tri(*copies[0], out, scale)
            except Exception as err:  # a point out of shared memory (f32 at BN = 128): not run
                print(f"triton G={g} {dtype} S={s} chunks={chunks} BN={bn} skipped: "
                      f"{str(err).splitlines()[0]}", flush=True)
                continue
            err = _rel(out, ref)
            assert err < tol, ("triton", g, dtype, s, chunks, bn, err)
            graph, eager = _timed(lambda q, k, v, o, tri=tri: tri(q, k, v, o, scale), copies, out)
            t = eager if graph is None else graph
            if best is None or t < best["s"]:
                best = {"s": t, "timing": "eager" if graph is None else "graph", "eager_s": eager,
                        "chunks": tri.chunks, "BN": bn}
    return best


def bench_decode(g: int, dtype: str, s: int, kernels: dict, variants, hbm: float, info: dict,
                 quick: int, sdpa: bool = True) -> dict:
    import torch

    scale = 1.0 / math.sqrt(D)
    q, k, v = _tensors(g, s, dtype, seed=s + g)
    kv_bytes = 2 * s * D * k.element_size()
    ref = _reference(q, k, v, scale)
    tol = 2e-2 if dtype == "bf16" else 1e-4
    out = torch.empty((g, D), dtype=torch.float32, device="cuda")
    copies = _copies(q, k, v, info["l2_bytes"])
    row = {"what": "decode", "G": g, "S": s, "log2S": int(math.log2(s)), "kv": dtype, "kv_bytes": kv_bytes,
           "kv_copies": len(copies)}

    def figures(t: float | None) -> dict:
        gbs = kv_bytes / t / 1e9 if t else None
        return {"gbs": gbs, "of_copy": gbs and gbs / hbm, "of_spec": gbs and gbs / info["spec_gbs"]}

    tri = _triton_best(g, dtype, s, copies, ref, out, scale, tol, info["sms"], quick)
    row["triton"] = tri and tri | figures(tri["s"]) | {"eager_gbs": kv_bytes / tri["eager_s"] / 1e9}
    row["variants"] = {}
    for name, r in _phobos_rows(kernels, variants, copies, ref, out, scale, tol).items():
        r |= figures(r["s"]) | {"eager_gbs": kv_bytes / r["eager_s"] / 1e9}
        r["over_triton"] = tri["s"] / r["s"] if tri else None
        row["variants"][name] = r
    if sdpa:
        qq, kk, vv = q[None, None], k[None, None], v[None, None]
        attention = torch.nn.functional.scaled_dot_product_attention
        try:
            t = cuda_median_s(lambda: attention(qq, kk, vv, scale=scale), warmup=1, repeat=3)
            row["sdpa"] = {"eager_s": t} | figures(t)
        except RuntimeError as err:  # out of memory for the math backend's G x S scores
            row["sdpa"] = {"error": str(err).splitlines()[0]}
    return row


def prepare_decode(cases, variants, bs_choices=BS_CHOICES, sms: int = 132, device: int = 0) -> dict:
    """phobos kernels per (G, dtype, S), per variant name, per BS, compiled and loaded ahead,
    several at once; the variants of one fan-in, partial schedule and launch form together
    (PHOBOS_SPLIT_FAN_IN, PHOBOS_SPLIT_SCHEDULE and PHOBOS_SPLIT_ONE_LAUNCH are read at compile
    time, and a thread pool shares one environment)."""
    kernels: dict = {}
    failed = []
    for form in sorted({(v.fan_in, v.schedule, v.one_launch) for v in variants}, key=str):
        fan_in, schedule, one = form
        jobs = []
        for g, dtype, s in cases:
            for variant in (v for v in variants if (v.fan_in, v.schedule, v.one_launch) == form):
                for bs in bs_choices:
                    kern = decode_kernel(g, dtype, bs, variant.split(sms), variant.rows(g, dtype))
                    kernels.setdefault((g, dtype, s), {}).setdefault(variant.name, {})[bs] = kern
                    jobs.append((kern, {"Q": (g, D), "K": (s, D), "V": (s, D), "O": (g, D)}))

        def prepare(job):
            kern, shapes = job
            try:
                kern.prepare_gpu(shapes, device)
                return None
            except Exception as err:  # a point pruned for its shared memory: the other BS is timed
                return kern, str(err).splitlines()[0]

        os.environ["PHOBOS_SPLIT_FAN_IN"] = str(fan_in)
        os.environ["PHOBOS_SPLIT_SCHEDULE"] = schedule
        if one is None:  # the cost model's choice (mainloops/split_loop/fused.py one_launch_pays)
            os.environ.pop("PHOBOS_SPLIT_ONE_LAUNCH", None)
        else:
            os.environ["PHOBOS_SPLIT_ONE_LAUNCH"] = "1" if one else "0"
        with ThreadPoolExecutor(8) as pool:
            failed += [f for f in pool.map(prepare, jobs) if f is not None]
    os.environ.pop("PHOBOS_SPLIT_FAN_IN", None)
    os.environ.pop("PHOBOS_SPLIT_SCHEDULE", None)
    os.environ.pop("PHOBOS_SPLIT_ONE_LAUNCH", None)
    for kern, why in failed:
        print(f"skipped {kern}: {why}", flush=True)
        for per_variant in kernels.values():
            for per in per_variant.values():
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


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def markdown(result: dict) -> str:
    info = result["device"]
    lines = [f"# decode and split-K on {info['name']} ({info['sms']} SMs)", "",
             f"HBM: copy {result['copy_gbs']:.0f} GB/s (read + write), spec {info['spec_gbs']:.0f} GB/s. "
             "GB/s of KV read per call: device time from a CUDA graph of calls over KV copies that "
             "overflow the L2 (`eager`: one call between CUDA events, host launch overhead included).", "",
             "| G | S | KV | variant | GB/s | of copy | of spec | eager GB/s | Triton GB/s | /Triton | "
             "Triton eager | SDPA eager | chunks, BS, launches |", "|" + "---|" * 13]
    for r in result["decode"]:
        tri = r.get("triton") or {}
        sdpa = (r.get("sdpa") or {}).get("gbs")
        for name, v in r["variants"].items():
            lines.append(f"| {r['G']} | 2^{r['log2S']} | {r['kv']} | {name} | {v['gbs']:.0f} | "
                         f"{v['of_copy']:.2f} | {v['of_spec']:.2f} | {v['eager_gbs']:.0f} | "
                         f"{_f(tri.get('gbs'), '.0f')} | {_f(v['over_triton'], '.2f')} | "
                         f"{_f(tri.get('eager_gbs'), '.0f')} | {_f(sdpa, '.0f')} | "
                         f"{v['chunks']}, {v['BS']}, {v['launches']} |")
    lines += summary(result)
    for r in result.get("splitk", []):
        lines += ["", f"split-K f32 M=N={r['M']} K={r['K']}: phobos {r['phobos_tflops']:.2f} TFLOP/s "
                  f"({r['phobos_chunks']} chunks), cuBLAS {r['cublas_tflops']:.2f} TFLOP/s, "
                  f"cuBLAS/phobos time {r['ratio_cublas_over_phobos']:.2f}"]
    return "\n".join(lines) + "\n"


def summary(result: dict) -> list[str]:
    """One line per variant over the cases it ran: the fraction of the copy's bandwidth (mean and
    worst) and the time against Triton's (geometric mean); the sweep picks the default by it."""
    lines = ["", "| variant | cases | mean of copy | worst of copy | geomean /Triton |",
             "|---|---|---|---|---|"]
    for name in result.get("variants", []):
        rows = [r["variants"][name] for r in result["decode"] if name in r["variants"]]
        if not rows:
            continue
        ratios = [v["over_triton"] for v in rows if v["over_triton"]]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
        lines.append(f"| {name} | {len(rows)} | {sum(v['of_copy'] for v in rows) / len(rows):.2f} | "
                     f"{min(v['of_copy'] for v in rows):.2f} | {_f(geo, '.2f')} |")
    return lines


def run(gs, log2s, dtypes, variants, bs_choices, quick: int, splitk: bool, sdpa: bool, out: Path) -> dict:
    info = device_info()
    hbm = copy_gbs()
    print(f"device {info}, copy {hbm:.0f} GB/s", flush=True)
    cases = [(g, dt, 1 << e) for dt in dtypes for g in gs for e in log2s]
    kernels = prepare_decode(cases, variants, bs_choices, info["sms"])
    rows = []
    result = {"device": info, "copy_gbs": hbm, "variants": [v.name for v in variants], "decode": rows}
    if splitk:  # first: it is one case, and the decode cases may run past a time limit
        result["splitk"] = [bench_splitk(info)]
        print(json.dumps(result["splitk"][0]), flush=True)
    for case in cases:
        if not any(kernels.get(case, {}).values()):
            print(f"no phobos point compiled for {case}", flush=True)
            continue
        row = bench_decode(*case, kernels[case], variants, hbm, info, quick, sdpa)
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
    ap.add_argument("--variants", default=DEFAULT_VARIANTS,
                    help="fan<N>[@<K>sm][+pad<R>],...: the merge tree's fan-in (0: none), K chunks per SM "
                         "(default: the cost model's), BG >= R rows for 16-bit KV; each is a row")
    ap.add_argument("--bs", default=",".join(map(str, BS_CHOICES)), help="BS values tried per variant")
    ap.add_argument("--quick", action="store_const", const=1, default=0, help="fewer Triton chunk counts")
    ap.add_argument("--quickest", action="store_const", const=2, dest="quick",
                    help="the Triton kernel at one chunk per SM only (BN 64 and 128)")
    ap.add_argument("--no-splitk", action="store_true")
    ap.add_argument("--no-sdpa", action="store_true")
    args = ap.parse_args(argv)
    if not args.out:
        ap.error("give --out PREFIX or set PHOBOS_DECODE_OUT")
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    out = Path(args.out)
    result = run(ints(args.g), ints(args.log2s), args.dtypes.split(","), parse_variants(args.variants),
                 tuple(ints(args.bs)), args.quick, not args.no_splitk, not args.no_sdpa, out)
    write(result, out)
    print(markdown(result))
    if WRONG:  # the table leaves them out; the run must not read as a clean one
        print(f"decode: {len(WRONG)} wrong result(s): {'; '.join(WRONG)}", file=sys.stderr)
        return 1
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
    import torch

    info = device_info()
    hbm = copy_gbs()
    case = (16, "bf16", 1 << 20)
    variants = parse_variants(DEFAULT_VARIANTS)
    kernels = prepare_decode([case], variants, sms=info["sms"])[case]
    row = bench_decode(*case, kernels, variants, hbm, info, quick=True, sdpa=False)
    best = row["variants"][variants[0].name]
    kern = kernels[variants[0].name][best["BS"]]
    q, k, v = _tensors(16, 1 << 20, "bf16", seed=1)
    out = q.new_empty((16, D), dtype=torch.float32)
    benchmark(lambda: (kern(q, k, v, out, 1.0 / math.sqrt(D)), torch.cuda.synchronize()))
    benchmark.extra_info.update(row)


if __name__ == "__main__":
    raise SystemExit(main())
