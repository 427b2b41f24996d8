"""Issue 36's attention rows (benchmarks/issue36_rows.py) at fixed (tile point, schedule)
candidates, side by side with cuDNN SDPA in the same process: what the tuner would choose
between, without its search, so that variants of the code generator (a schedule field such as
the CTA order or the softmax maximum's chains, Schedule.fold_chains) are compared on the same
inputs within one call. Every candidate's output is checked
against SDPA before it is timed; then ROUNDS alternated rounds, each the mean of REPS back-to-back
launches timed by CUDA events (the anchor in every round too), and the median of the rounds.

    python3 benchmarks/attention_variants.py --out $OUT/attention-variants [--rows causal,one,full]

Writes OUT.md (a table per row: candidate, ms, SDPA / candidate) and OUT.json."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

from benchmarks.gpu_timing import events_ms
from benchmarks.issue36_rows import ROWS
from compiler.cuda.schedule import WIDE_THREADS, Schedule

ROUNDS = 9
REPS = 10

TMA_PP4 = Schedule(stages=4, wgmma=True, rotate=True, tma=True, pingpong=True)
TMA3 = Schedule(stages=3, wgmma=True, rotate=True, tma=True)
TMA4 = Schedule(stages=4, wgmma=True, rotate=True, tma=True)
WIDE4 = Schedule(stages=4, order="grouped", wgmma=True, rotate=True, threads=WIDE_THREADS)


def _both_orders(point, schedules):
    return [(point, dataclasses.replace(s, order=o)) for s in schedules for o in ("row", "grouped")]


def _row(prefix: str):
    return next(r for r in ROWS if r.name.startswith(prefix))


def _one_chain(point, schedule):
    return (point, dataclasses.replace(schedule, fold_chains=1))


CANDIDATES = {
    # causal GQA: row (each head's query blocks longest first) against grouped (every head's
    # longest blocks first, render_plan.longest_first_order)
    "causal": (_row("attention bf16 D=128 N=4096 causal"), [
        *_both_orders({"BR": 128, "BC": 128}, [TMA_PP4, TMA3, TMA4]),
        *_both_orders({"BR": 128, "BC": 64}, [TMA_PP4]),
        _one_chain({"BR": 128, "BC": 128}, dataclasses.replace(TMA_PP4, order="grouped")),
        _one_chain({"BR": 128, "BC": 128}, dataclasses.replace(TMA3, order="grouped")),
    ]),
    "one": (_row("attention bf16 one head"), [
        ({"BR": 128, "BC": 128}, TMA_PP4),
        ({"BR": 128, "BC": 128}, TMA3),
        ({"BR": 128, "BC": 64}, TMA_PP4),
        ({"BR": 64, "BC": 128}, TMA4),
        _one_chain({"BR": 128, "BC": 128}, TMA_PP4),
        _one_chain({"BR": 128, "BC": 128}, TMA3),
    ]),
    "full": (_row("attention bf16 D=128 N=4096 full"), [
        ({"BR": 128, "BC": 128}, TMA3),
        ({"BR": 128, "BC": 128}, TMA_PP4),
        ({"BR": 128, "BC": 128}, TMA4),
        ({"BR": 128, "BC": 64}, TMA_PP4),
        ({"BR": 256, "BC": 32}, WIDE4),
        _one_chain({"BR": 128, "BC": 128}, TMA3),
        _one_chain({"BR": 128, "BC": 128}, TMA_PP4),
    ]),
}


def _operands(row, torch):
    d = row.dims
    kv = d.get("HKV", d["H"])
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(d["H"], d["N"], d["D"], device="cuda", generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(kv, d["N"], d["D"], device="cuda", generator=gen).to(torch.bfloat16) for _ in "kv")
    return q, k, v, torch.empty_like(q), 1.0 / math.sqrt(d["D"])


def _sdpa(q, k, v, scale, causal, torch):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal, scale=scale,
                                            enable_gqa=k.shape[0] != q.shape[0])[0]


def _build(kernel, dims, candidates, cc, pool) -> list:
    """(compiled, why) of each candidate, compiled in parallel processes."""
    return pool.build_all([(kernel, dict(dims), point, sched, False, cc) for point, sched in candidates])


def run_row(key: str, log) -> dict:
    import cupy
    import torch

    from compiler.cuda.launch import launch
    from compiler.cuda.tuning import autotune, pool
    from compiler.frontend import load as frontend

    row, candidates = CANDIDATES[key]
    kernel = frontend.select_kernel(frontend.load_text(row.text()), None)
    causal = "causal" in row.kind
    q, k, v, o, scale = _operands(row, torch)
    arrays = {n: cupy.asarray(t.view(torch.int16)) for n, t in zip("QKVO", (q, k, v, o), strict=True)}
    expected = _sdpa(q, k, v, scale, causal, torch).float()
    built = _build(kernel, row.dims, candidates, autotune.gpu_capability(), pool)
    runs, results = [], []
    for (point, sched), (compiled, why) in zip(candidates, built, strict=True):
        name = f"{point} {sched.key()}"
        if compiled is None:
            results.append({"candidate": name, "pruned": why})
            continue
        o.fill_(float("nan"))
        launch(compiled, arrays, {"scale": scale})
        torch.cuda.synchronize()
        err = float((o.float() - expected).norm() / expected.norm())
        if not err < 1e-2:  # bf16 P and O: a few 1e-3 (the table's rows measured 0.7-1.5e-4)
            results.append({"candidate": name, "wrong": err})
            continue
        runs.append((name, err, lambda c=compiled: launch(c, arrays, {"scale": scale})))
    anchor = lambda: _sdpa(q, k, v, scale, causal, torch)  # noqa: E731
    times = {name: [] for name, _, _ in runs} | {"SDPA": []}
    for fn in [f for _, _, f in runs] + [anchor]:
        fn()
    torch.cuda.synchronize()
    for _ in range(ROUNDS):
        for name, _, fn in runs:
            times[name].append(events_ms(fn, torch, REPS))
        times["SDPA"].append(events_ms(anchor, torch, REPS))
    sdpa = statistics.median(times["SDPA"])
    for name, err, _ in runs:
        ms = statistics.median(times[name])
        results.append({"candidate": name, "ms": ms, "ratio": sdpa / ms, "rel_err": err,
                        "spread_ms": [min(times[name]), max(times[name])]})
        log(f"{key}: {name} {ms:.4f} ms ({sdpa / ms:.3f}x SDPA {sdpa:.4f} ms)")
    return {"row": row.name, "sdpa_ms": sdpa, "candidates": results}


def render(rows: list[dict]) -> str:
    out = []
    for r in rows:
        out += [f"## {r['row']} (SDPA {r['sdpa_ms']:.4f} ms)", "", "| candidate | ms | SDPA / ms | rel err |",
                "| --- | ---: | ---: | ---: |"]
        for c in sorted(r["candidates"], key=lambda c: c.get("ms", math.inf)):
            if "ms" in c:
                out.append(f"| {c['candidate']} | {c['ms']:.4f} | {c['ratio']:.3f}x | {c['rel_err']:.1e} |")
            else:
                why = c.get("pruned") or f"wrong: rel err {c['wrong']:.2e}"
                out.append(f"| {c['candidate']} | {why} | | |")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output path without suffix (.md and .json are written)")
    ap.add_argument("--rows", default="causal,one,full", help="of " + ",".join(CANDIDATES))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for key in args.rows.split(","):
        rows.append(run_row(key, lambda line: print(line, file=sys.stderr, flush=True)))
        out.with_suffix(".md").write_text(render(rows), encoding="utf-8")  # each row as it is done
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(render(rows))


if __name__ == "__main__":
    main()
