"""On the CPU: which max/min folds run as interleaved chains (compiler/cuda/reductions.py): those
of CHAINED_FOLD or more elements per thread, along either axis, float or integer, on CUDA cores
and in attention's softmax on tensor cores; sums and short folds keep one chain. The GPU test
(test_chained_folds_gpu.py) checks the results bit for bit against the interpreter."""

from __future__ import annotations

import dataclasses
import re

import pytest
from chained_fold_cases import COLUMNS, ROWS
from cuda_cases import load_example

from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import TMA_ATTENTION_PROBE, Schedule, tensor_core_space
from compiler.frontend import binding


def _source(kernel, dims, point, schedule=None):
    b = binding.bind(kernel, dims, None, point)
    return generate_source(kernel, b, **({"schedule": schedule} if schedule else {})).source


def _folds(src: str, chains: int = 4) -> list[str]:
    """'chained' or 'single' for each per-thread fold, in order."""
    pattern = rf"(?:int|float) a_(\[{chains}\])?[ ;=]"
    return ["chained" if m.group(1) else "single" for m in re.finditer(pattern, src)]


@pytest.mark.parametrize("bc,expected", [(256, ["chained", "chained", "single"]), (8, ["single"] * 3)])
def test_long_row_folds_of_max_and_min_are_chained(bc, expected):
    assert _folds(_source(ROWS, {"R": 37, "C": bc}, {"BR": 16, "BC": bc})) == expected


def test_column_folds_are_chained_for_floats_and_integers():
    src = _source(COLUMNS, {"C": 40}, {"BR": 256, "BC": 16})
    assert _folds(src).count("chained") == 2
    assert "int a_[4];" in src and "float a_[4];" in src


def test_the_chains_start_from_the_identity_and_combine_pairwise():
    src = _source(ROWS, {"R": 37, "C": 256}, {"BR": 16, "BC": 256})
    assert "a_[_j % 4] = _j == 0 ? fmaxf(__int_as_float(0xff800000), el_) : _j < 4 ? el_ : " in src
    assert "fmaxf(fmaxf(a_[0], a_[1]), fmaxf(a_[2], a_[3]))" in src


def test_attention_softmax_row_maximum_is_chained():
    kernel = load_example("mha_bf16.phk")
    src = _source(kernel, {"H": 1, "N": 4096, "D": 64}, {"BR": 128, "BC": 128}, TMA_ATTENTION_PROBE)
    # the row maximum chained, the row sum one chain
    assert _folds(src) == ["chained", "single"]


def test_the_schedule_sets_the_chains_and_one_chain_is_the_plain_fold():
    dims, point = {"R": 37, "C": 256}, {"BR": 16, "BC": 256}
    three = _source(ROWS, dims, point, Schedule(fold_chains=3))
    assert _folds(three, 3) == ["chained", "chained", "single"]
    assert "a_[_j % 3] = _j == 0 ?" in three and "fmaxf(a_[0], fmaxf(a_[1], a_[2]))" in three
    one = _source(ROWS, dims, point, Schedule(fold_chains=1))
    assert _folds(one) == ["single"] * 3 and "a_[" not in one and "el_" not in one
    assert Schedule(fold_chains=1).key().endswith("-fc1")
    assert Schedule().key() == Schedule(fold_chains=4).key()


def test_attention_with_one_chain_and_the_tuner_tries_both():
    kernel = load_example("mha_bf16.phk")
    one = dataclasses.replace(TMA_ATTENTION_PROBE, fold_chains=1)
    src = _source(kernel, {"H": 1, "N": 4096, "D": 64}, {"BR": 128, "BC": 128}, one)
    assert _folds(src) == ["single", "single"]
    tma_attention = [s for s in tensor_core_space(8, rotates=True) if s.tma and s.rotate]
    assert {s.fold_chains for s in tma_attention} == {1, 4}
    # every other field's combination with both, so that the chains are searched on their own
    assert len({dataclasses.replace(s, fold_chains=4) for s in tma_attention}) * 2 == len(tma_attention)
    # matmuls have no fold to chain: their space is not doubled
    assert {s.fold_chains for s in tensor_core_space(8, deep=True, sm_count=132)} == {4}
