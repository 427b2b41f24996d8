"""Helpers shared by the interpreter benchmarks (test_interp_*.py): loading examples, timing the
numpy baseline, and recording the interpreter's ratio to it in pytest-benchmark's extra_info."""

from __future__ import annotations

import timeit
from pathlib import Path

from compiler.frontend.load import load_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def best_of(func, repeat=5) -> float:
    return min(timeit.repeat(func, number=1, repeat=repeat))


def example_kernel(name):
    return load_file(EXAMPLES / f"{name}.phk").kernel()


def record_ratio(benchmark, numpy_seconds: float) -> None:
    interp = benchmark.stats.stats.min
    benchmark.extra_info["numpy_s"] = numpy_seconds
    benchmark.extra_info["ratio_to_numpy"] = interp / numpy_seconds
    print(f"\n{benchmark.name}: interpreter {interp:.3f} s, numpy {numpy_seconds:.4f} s, "
          f"ratio {interp / numpy_seconds:.1f}")
