"""The split factor as a tuning dimension (compiler/cuda/mainloops/split_loop/tune.py), on the CPU: the
candidates around the cost model's factor, the fastest kept and cached under its own key (read back without
timing), PHOBOS_RETUNE times again, and an unsplit model choice is not tuned. A timer stands in for the GPU
(test_split_loop_gpu.py times the real launches)."""

from __future__ import annotations

import pytest
from split_cases import decode_source, load

from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import tune as split_tune
from compiler.cuda.tuning import cache as tune_cache
from compiler.frontend import binding


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tune_cache, "driver_version", lambda: 12040)
    return tmp_path


def _decode(s: int):
    kernel = load(decode_source("bf16", 16, "64"))
    return kernel, binding.bind(kernel, {"G": 16, "S": s}, None, {"BS": 64})


def test_candidates_are_the_model_factor_halved_and_doubled():
    assert split_tune.candidates(66, 4096) == [33, 66, 132]
    assert split_tune.candidates(3, 4096) == [2, 3, 6]
    assert split_tune.candidates(200, 300) == [100, 200, 300]  # never more chunks than iterations


def test_the_fastest_factor_is_kept_and_cached(cache_dir, monkeypatch):
    kernel, b = _decode(1 << 20)
    model = split_plan.model_factor(kernel, b, 132)
    assert model > 1
    timed: list[int] = []

    def measure(f):
        timed.append(f)
        return abs(f - 2 * model) + 1.0  # the doubled factor is fastest

    got = split_tune.tune_factor(kernel, b, cc=90, sm_count=132, gpu="H100 test", measure=measure)
    assert got == 2 * model and sorted(timed) == split_tune.candidates(model, (1 << 20) // 64)
    again = split_tune.tune_factor(kernel, b, cc=90, sm_count=132, gpu="H100 test",
                                   measure=lambda f: pytest.fail("timed although cached"))
    assert again == got
    monkeypatch.setenv("PHOBOS_RETUNE", "1")
    assert split_tune.tune_factor(kernel, b, cc=90, sm_count=132, gpu="H100 test",
                                  measure=lambda f: float(f)) == min(split_tune.candidates(model, 1 << 14))
    other = split_tune.tune_factor(kernel, b, cc=80, sm_count=108, gpu="A100 test",
                                   measure=lambda f: float(-f))
    assert other == max(split_tune.candidates(split_plan.model_factor(kernel, b, 108), 1 << 14))


def test_a_loop_the_model_does_not_split_is_not_tuned(cache_dir):
    kernel, b = _decode(64 * 20)  # 20 iterations: below split_plan.MIN_SPLIT_ITERATIONS
    got = split_tune.tune_factor(kernel, b, cc=90, sm_count=132, gpu="H100 test",
                                 measure=lambda f: pytest.fail("timed"))
    assert got == 1
