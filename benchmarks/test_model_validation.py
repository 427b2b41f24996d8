"""The cluster tuner's model against measurement, under pytest-benchmark.

Each case calibrates the model on fresh local CPU pods, ranks every @cluster combination, runs
each kept one (5 times, interleaved; the median counts) and checks issue 8's criterion: the
model's first choice measures within 10% of the best measured combination. The benchmark's time
is the whole validation (calibration and every run); predicted and measured times go to
`extra_info`. The full table for docs/performance.md comes from benchmarks/model_validation.py.

    PYTHONPATH=. .venv/bin/pytest benchmarks/test_model_validation.py --benchmark-only
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import model_validation as mv  # noqa: E402  (the script beside this file)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["matmul", "flash_attention"])
@pytest.mark.parametrize("nodes", [2, 4])
def test_model_choice_within_10_percent_of_best_measured(benchmark, kernel, nodes, tmp_path, monkeypatch):
    import capnp

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))
    for name in mv.blas.THREAD_VARIABLES:  # as the script does: see mv.single_threaded_blas
        if name not in mv.os.environ:
            monkeypatch.setenv(name, "1")
    said: list[str] = []

    def validate():
        return asyncio.run(capnp.run(mv.validate(mv.CASES[kernel], nodes, 5, tmp_path, said.append)))

    result = benchmark.pedantic(validate, rounds=1, iterations=1)
    rows = [{k: row[k] for k in ("combination", "predicted_s", "measured_s")} for row in result["rows"]]
    benchmark.extra_info.update({
        "chosen": result["chosen"], "best_measured": result["best_measured"],
        "chosen_over_best": result["chosen_over_best"], "rows": rows})
    print("\n".join(said))
    assert all(row["predicted_s"] > 0 for row in result["rows"])
    assert result["within_tolerance"], (
        f"{kernel} on {nodes} pods: the model chose {result['chosen']}, measured "
        f"{100 * result['chosen_over_best']:+.1f}% against the best ({result['best_measured']})")
