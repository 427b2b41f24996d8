"""On the CPU: which max/min folds run as interleaved chains (compiler/cuda/reductions.py): those
of CHAINED_FOLD or more elements per thread, along either axis, float or integer, on CUDA cores
and in attention's softmax on tensor cores; sums and short folds keep one chain. The GPU test
(test_chained_folds_gpu.py) checks the results bit for bit against the interpreter."""

from __future__ import annotations

import re

import pytest
from chained_fold_cases import COLUMNS, ROWS
from cuda_cases import load_example

from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import TMA_ATTENTION_PROBE
from compiler.frontend import binding


def _source(kernel, dims, point, schedule=None):
    b = binding.bind(kernel, dims, None, point)
    return generate_source(kernel, b, **({"schedule": schedule} if schedule else {})).source


def _folds(src: str) -> list[str]:
    """'chained' or 'single' for each per-thread fold, in order."""
    return ["chained" if m.group(1) else "single" for m in re.finditer(r"(?:int|float) a_(\[4\])?[ ;=]", src)]


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
