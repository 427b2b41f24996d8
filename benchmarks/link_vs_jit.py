"""Does loading the compile workers' machine code (cuLink, compile_pool.machine_code) run a
kernel as fast as loading its PTX (the driver's JIT)? For issue 36 rows, on one GPU: tune the row
(the first-call path), then load its winner's PTX both ways as two modules and time them in
alternated rounds (CUDA events, median). Prints one line per row; `--out FILE` writes them."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from issue36_rows import ROWS  # noqa: E402

from compiler.cuda import launch  # noqa: E402
from compiler.cuda.compiled import compile_kernel  # noqa: E402
from compiler.cuda.tuning import autotune
from compiler.cuda.tuning import pool as compile_pool
from compiler.cuda.tuning import timing as tune_timing
from compiler.frontend import load as frontend  # noqa: E402
from compiler.frontend.binding import bind  # noqa: E402


def _median_ms(compiled, arrays, scalars, launches: int = 10) -> float:
    return float(np.median([tune_timing._timed(compiled, arrays, scalars) for _ in range(launches)]))


def compare(row) -> str:
    import cupy

    kernel = frontend.load_text(row.text(), "row.phk").kernels[0]
    result = autotune.tune(kernel, row.dims, use_cache=False)
    binding = bind(kernel, row.dims, None, result.best)
    compiled = compile_kernel(kernel, binding, schedule=result.schedule, cc=90)
    jit = dataclasses.replace(compiled, ptx=compiled.ptx + "\n// loaded as PTX\n")
    linked = dataclasses.replace(compiled, ptx=compiled.ptx + "\n// loaded as cuLink's image\n")
    launch.load(jit)
    image = compile_pool.machine_code(linked.ptx, cupy.cuda.Device().id)
    launch.preload(linked, image)
    arrays, scalars = tune_timing.tuning_inputs(kernel, dict(binding.env))
    times = {"jit": [], "image": []}
    for _ in range(5):
        for name, k in (("jit", jit), ("image", linked)):
            launch.launch(k, arrays, scalars)
            times[name].append(_median_ms(k, arrays, scalars))
    j, i = np.median(times["jit"]), np.median(times["image"])
    return (f"{row.name}: tuned {result.best} {result.schedule.key()} {result.best_ms:.3f} ms; "
            f"PTX JIT {j:.3f} ms, cuLink image {i:.3f} ms ({'none' if image is None else len(image)} bytes), "
            f"image/jit {i / j:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="bf16 matmul 8192^3,f32 matmul (the seed's kernel) 8192^3,"
                        "attention bf16 D=128 N=4096 full, 32 heads")
    parser.add_argument("--out")
    args = parser.parse_args()
    wanted = [r for r in ROWS if r.name in args.rows]
    lines = []
    for row in wanted:
        lines.append(compare(row))
        print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
