"""Golden check of the CUDA generator: the CUDA C++ of a broad set of (kernel, dims, tile point,
schedule, precision) cases, by sha256, so that a refactor of compiler/cuda can show the text it
generates is byte-identical.

  cuda_golden.py record OUT.json [--sources DIR]   hash every case (and write the sources to DIR)
  cuda_golden.py compare OUT.json [--sources DIR]  regenerate and name every case that differs

The cases: every examples/*.phk kernel, the novel corpus (tests/cuda/novel/*.phk, at its own
dims) and the tests' inline kernels, at each @autotune point (all of them up to MAX_POINTS, else
an even sample), under each schedule of SCHEDULES, with and without the TF32 override. A case
the generator refuses (a pruned point, a schedule the kernel cannot take) records its error text,
which must stay the same too. Generating text needs no GPU and no NVRTC.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "cuda")]

from compiler.cuda.compiled import generate_source  # noqa: E402
from compiler.cuda.schedule import (  # noqa: E402
    DEFAULT,
    TF32_TMA_PROBE,
    TMA_ATTENTION_PROBE,
    WGMMA_DEEP_PROBE,
    WGMMA_PROBE,
    WIDE_THREADS,
    Schedule,
)
from compiler.frontend import binding  # noqa: E402
from compiler.frontend import load as frontend  # noqa: E402
from compiler.frontend.diagnostics import CompileError  # noqa: E402

MAX_POINTS = 6  # tile points per kernel (an even sample of larger spaces, first and last kept)

# every mainloop and its variants: mma.sync / FMA at several warp layouts, depths and CTA
# orders; warpgroup MMA early and late copies, rotated, ping-pong, TMA-fed (one dot, TF32,
# attention with and without ping-pong), and attention on four warpgroups
SCHEDULES = {
    "default": DEFAULT,
    "mma-wm2-s2-grouped": Schedule(warps_m=2, stages=2, order="grouped"),
    "mma-wm4-s4": Schedule(warps_m=4, stages=4),
    "mma-t128": Schedule(threads=128, stages=3, order="grouped", group=4),
    "wgmma": WGMMA_PROBE,
    "wgmma-deep": WGMMA_DEEP_PROBE,
    "wgmma-late": Schedule(stages=3, wgmma=True, late_copies=True),
    "wgmma-rot": Schedule(stages=4, order="grouped", wgmma=True, rotate=True),
    "wgmma-rot-late": Schedule(stages=5, wgmma=True, late_copies=True, rotate=True),
    "pingpong": Schedule(stages=5, order="grouped", wgmma=True, rotate=True, pingpong=True),
    "pingpong-late": Schedule(stages=6, wgmma=True, late_copies=True, rotate=True, pingpong=True),
    "tma": Schedule(stages=4, order="grouped", wgmma=True, tma=True),
    "tma-6": Schedule(stages=6, wgmma=True, tma=True),
    "tma-tf32": TF32_TMA_PROBE,
    "tma-attn-pp": TMA_ATTENTION_PROBE,
    "tma-attn": Schedule(stages=3, wgmma=True, rotate=True, tma=True),
    "wide": Schedule(stages=4, order="grouped", wgmma=True, rotate=True, threads=WIDE_THREADS),
}


def kernels():
    """(label, kernel, dims) of every case kernel."""
    import cuda_cases
    import novel_cases

    def dims_of(kernel, value=512):
        fixed = {"D": 64, "H": 8}
        return {d: fixed.get(d, value) for d in cuda_cases.free_dims(kernel)}

    for name in cuda_cases.example_names() + sorted(cuda_cases.INLINE):
        kernel = cuda_cases.load_example(name)
        yield name, kernel, dims_of(kernel)
        yield name + "@ragged", kernel, dims_of(kernel, 200)
    for path in sorted(novel_cases.NOVEL.glob("*.phk")):
        kernel = frontend.load_file(path).kernel()
        case = novel_cases.CASES.get(path.stem)
        yield "novel/" + path.name, kernel, dict(case.dims) if case else dims_of(kernel)


def points(kernel) -> list[dict]:
    import cuda_cases

    every = cuda_cases.all_points(kernel)
    if len(every) <= MAX_POINTS:
        return every
    step = (len(every) - 1) / (MAX_POINTS - 1)
    return [every[round(i * step)] for i in range(MAX_POINTS)]


def cases():
    for label, kernel, dims in kernels():
        for point in points(kernel):
            ptext = ",".join(f"{k}={v}" for k, v in sorted(point.items()))
            for sname, schedule in SCHEDULES.items():
                for tf32 in (False, True):
                    key = f"{label}|{ptext}|{sname}|{'tf32' if tf32 else 'exact'}"
                    yield key, kernel, dims, point, schedule, tf32


def generated_text(kernel, dims, point, schedule, tf32) -> str:
    try:
        b = binding.bind(kernel, dims, None, point)
        gen = generate_source(kernel, b, tf32=tf32, schedule=schedule)
    except CompileError as e:
        return f"error: {e.message}"
    meta = (gen.entry, gen.params, gen.grid, gen.block, gen.shared_bytes, gen.need, gen.tensor_maps)
    # the need's span names the kernel's file by its absolute path: hashes must not depend on
    # where the checkout lies
    return f"// {meta}\n".replace(str(ROOT), "<repo>") + gen.source


def record(sources: Path | None) -> dict[str, str]:
    out = {}
    for key, kernel, dims, point, schedule, tf32 in cases():
        text = generated_text(kernel, dims, point, schedule, tf32)
        out[key] = hashlib.sha256(text.encode()).hexdigest()
        if sources is not None:
            name = hashlib.sha256(key.encode()).hexdigest()[:20] + ".cu"
            (sources / name).write_text(f"// case {key}\n" + text)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("hashes", type=Path)
    ap.add_argument("--sources", type=Path, default=None)
    args = ap.parse_args()
    if args.sources is not None:
        args.sources.mkdir(parents=True, exist_ok=True)
    got = record(args.sources)
    if args.mode == "record":
        args.hashes.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
        errors = sum(1 for k in got if got[k] == hashlib.sha256(b"").hexdigest())
        print(f"recorded {len(got)} cases ({errors} empty)")
        return 0
    want = json.loads(args.hashes.read_text())
    differ = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    for k in differ:
        print(f"differs: {k}")
    print(f"{len(got)} cases, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
