"""TF32 rounding, bit for bit (docs/language.md §4.1): round to nearest, ties to even, on the f32
bits. The interpreter (values.round_tf32_bits, the meaning) against the H200's own results on
edge patterns, and the integer sequence the generated CUDA uses below sm_90 (compiler/cuda/tf32.py
RNE_STEPS, the same expression text evaluated here on numpy uint32) against the interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cuda import tf32
from compiler.interp import values as val

# (f32 bits in, TF32 bits out), as measured on the H200: `cvt.rn.tf32.f32`, and a bulk tensor
# copy (TMA) through a TFLOAT32 tensor map, gave these outputs, the two alike on every row
# (benchmarks/results/nvidia-h200/tf32-rounding-2026-12-01/tf32_edges.json, its probe beside it).
# The 13 low fraction bits are the ones rounded away: a tie is a low part of exactly 0x1000, and
# the kept part's lowest bit is bit 13 (0x2000).
MEASURED = [
    (0x00000000, 0x00000000),  # +0, -0
    (0x80000000, 0x80000000),
    (0x00000001, 0x00000000),  # the smallest subnormals: rounded, not flushed, to 0
    (0x80000001, 0x80000000),
    (0x00000FFF, 0x00000000),  # just below a tie
    (0x00001000, 0x00000000),  # tie, kept part even (0): stays (ties away: 0x2000)
    (0x00001001, 0x00002000),  # just above a tie
    (0x00003000, 0x00004000),  # tie, kept part odd: up to even
    (0x00001FFF, 0x00002000),
    (0x007FFFFF, 0x00800000),  # the largest subnormals round up into the smallest normal
    (0x807FFFFF, 0x80800000),
    (0x007FF000, 0x00800000),
    (0x00800000, 0x00800000),  # the smallest normal
    (0x7F7FFFFF, 0x7F800000),  # f32's largest finite value: past the largest TF32, inf
    (0xFF7FFFFF, 0xFF800000),
    (0x7F7FF000, 0x7F800000),  # tie past the largest TF32 value (kept part odd): inf
    (0x7F7FE000, 0x7F7FE000),  # the largest TF32 value
    (0x7F7FEFFF, 0x7F7FE000),
    (0x7F7FF001, 0x7F800000),
    (0x7F800000, 0x7F800000),  # inf
    (0xFF800000, 0xFF800000),
    (0x7FC00000, 0x7FFFE000),  # every NaN, quiet or signalling, of either sign: 0x7fffe000
    (0x7F800001, 0x7FFFE000),  # (a payload only in the dropped bits does not make it inf)
    (0x7F801000, 0x7FFFE000),
    (0x7FBFFFFF, 0x7FFFE000),
    (0x7FFFFFFF, 0x7FFFE000),  # (no bias added: neither inf nor a sign flip)
    (0xFFFFFFFF, 0x7FFFE000),
    (0xFFC00001, 0x7FFFE000),
    (0x3F800000, 0x3F800000),  # 1
    (0x3F801000, 0x3F800000),  # 1 + 2^-11: tie, to even (ties away would give 1 + 2^-10)
    (0x3F803000, 0x3F804000),  # 1 + 3 * 2^-11: tie, to even upwards
    (0x3F802FFF, 0x3F802000),
    (0x3F801001, 0x3F802000),
    (0xBF801000, 0xBF800000),  # the same ties on the negative side
    (0xBF803000, 0xBF804000),
    (0x33800000, 0x33800000),
    (0x00801000, 0x00800000),  # ties on the smallest normals
    (0x00803000, 0x00804000),
    (0x00FFF000, 0x01000000),  # tie at the top of a binade: up into the next one
]
# More edges, from the same rule (not in the measured file).
DERIVED = [
    (0x00005000, 0x00004000),  # subnormal tie, kept part even: down
    (0x80003000, 0x80004000),
    (0x3FFFF000, 0x40000000),  # tie at the top of the binade of 1: 2
    (0x3FFFFFFF, 0x40000000),
    (0x7F7FD000, 0x7F7FC000),  # a tie below the largest TF32 value, kept part even: down
    (0xFF7FF000, 0xFF800000),
    (0x7F802000, 0x7FFFE000),
    (0xFF800001, 0x7FFFE000),
]
EDGES = MEASURED + DERIVED


def _bits(values) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def _hex(a: np.ndarray) -> list[str]:
    return [f"{int(x):#010x}" for x in a]


def integer_sequence(u: np.ndarray) -> np.ndarray:
    """The generated code's tf32_of below sm_90: RNE_STEPS, the text the C helper is made of."""
    env = {"u": u}
    for name, expr in tf32.RNE_STEPS:
        env[name] = eval(expr, {"__builtins__": {}}, env)  # noqa: S307 - our own integer expressions
        assert env[name].dtype == np.uint32, (name, env[name].dtype)  # no widening: C's unsigned
    return env[tf32.RNE_STEPS[-1][0]]


def test_interpreter_rounds_every_edge_pattern():
    inputs, want = _bits([i for i, _ in EDGES]), _bits([o for _, o in EDGES])
    got = val.round_tf32_bits(inputs)
    assert got.dtype == np.uint32 and _hex(got) == _hex(want)
    as_float = val.round_to("tf32", inputs.view(np.float32))
    assert as_float.dtype == np.float32 and _hex(as_float.view(np.uint32)) == _hex(want)


def test_rounding_is_idempotent_and_clears_the_low_bits():
    u = np.random.default_rng(5).integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    once = val.round_tf32_bits(u)
    assert not np.any(once & np.uint32(0x1FFF))
    assert np.array_equal(val.round_tf32_bits(once), once)


def _sweep() -> np.ndarray:
    """Every low 13-bit pattern under kept parts at the edges of each class of value, both signs."""
    highs = [0x00000000, 0x007FE000, 0x00800000, 0x3F800000, 0x3F802000, 0x3FFFE000, 0x7F7FC000,
             0x7F7FE000, 0x7F800000, 0x7FBFE000, 0x7FC00000, 0x7FFFE000]  # the last four: NaNs
    low = np.arange(1 << 13, dtype=np.uint32)
    parts = [np.uint32(h | s) | low for h in highs for s in (0, 0x80000000)]
    return np.concatenate(parts)


def test_integer_sequence_equals_interpreter_on_edges_sweep_and_random_patterns():
    rng = np.random.default_rng(14)
    u = np.concatenate([
        _bits([i for i, _ in EDGES]),
        _sweep(),
        rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32),
    ])
    got, want = integer_sequence(u), val.round_tf32_bits(u)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, list(zip(_hex(u[bad[:8]]), _hex(got[bad[:8]]), _hex(want[bad[:8]]), strict=True))


def test_the_generated_helper_is_made_of_the_tested_steps():
    """The C helper declares exactly RNE_STEPS (so the test above checks the emitted text) below
    sm_90, and uses cvt.rn from sm_90; nothing rounds ties away from zero."""
    below = tf32.PRELUDE.split("#else")[1].split("#endif")[0]
    for name, expr in tf32.RNE_STEPS:
        assert f"const unsigned {name} = {expr};" in below
    assert "#if __CUDA_ARCH__ >= 900" in tf32.PRELUDE and "cvt.rn.tf32.f32" in tf32.PRELUDE
    assert "rna" not in tf32.PRELUDE


@pytest.mark.parametrize(("pattern", "expected"), [(0x3F801000, 1.0), (0x3F803000, 1.0 + 2.0**-9)])
def test_tf32_dot_of_a_tie_rounds_it_to_even(pattern, expected):
    """The interpreter's TF32 dot multiplies the rounded operands: a tie times 1 shows the rounding."""
    a = _bits([pattern]).view(np.float32).reshape(1, 1, 1, 1, 1)
    one = np.ones((1, 1, 1, 1, 1), np.float32)
    assert val.dot(a, one, "tf32").ravel().tolist() == [expected]
