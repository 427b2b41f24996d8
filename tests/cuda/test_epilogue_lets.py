"""The epilogue stage (compiler/cuda/stores/epilogue.py): a top-level element-wise let read once by the
next store or let is written into it. The rewritten kernel means what the kernel means: the
reference interpreter gives the same bits for both; a let it must not move is left alone."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import random_inputs
from tma_store_cases import LINEAR_RELU

from compiler.cuda import stages
from compiler.cuda.schedule import Schedule
from compiler.cuda.stores.epilogue import inline_epilogue_lets
from compiler.frontend import binding, ir, walk
from compiler.frontend import load as frontend
from compiler.interp import interpreter as interp

HEAD = """@autotune(TM in [16], TN in [16], TK in [8])
kernel k(A: tensor<f32>[M, K], B: tensor<f32>[K, N], bias: tensor<f32>[N], C: tensor<f32>[M, N],
         D: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
"""
OUT = "[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN]"
BIAS = "expand(bias[ctx.block.y * TN :+ TN], axis = 0)"
MOVED = {  # each let is written into its use
    "chain": f"""  let a = acc * 2.0 + {BIAS}
  let b = exp(min(a, 4.0)) - 1.0
  C{OUT} = b
  D{OUT} = acc
}}
""",
    "store_between": f"""  let z = max(acc + {BIAS}, 0.0)
  D{OUT} = acc
  C{OUT} = z
}}
""",
}
KEPT = {  # each let stays a tile of its own
    "read_twice": f"""  let z = acc + {BIAS}
  C{OUT} = z
  D{OUT} = z * z
}}
""",
    "reduction": f"""  let z = acc - expand(max(acc, axis = 1), axis = 1)
  C{OUT} = z
  D{OUT} = acc
}}
""",
    "var_assigned_between": f"""  let z = acc + {BIAS}
  acc = acc * 3.0
  C{OUT} = z
  D{OUT} = acc
}}
""",
    "its_load_stored_between": f"""  let z = acc + C{OUT}
  C{OUT} = acc
  D{OUT} = z
}}
""",
    "read_in_a_loop": f"""  let z = acc + {BIAS}
  for i in range(0, 2, 1) {{
    D{OUT} = z
  }}
  C{OUT} = acc
}}
""",
}
DIMS = [{"M": 32, "N": 48, "K": 24}, {"M": 29, "N": 37, "K": 19}]
POINT = {"TM": 16, "TN": 16, "TK": 8}


def _kernel(text: str) -> ir.Kernel:
    return frontend.select_kernel(frontend.load_text(text), None)


def _top_lets(k: ir.Kernel) -> list[str]:
    return [s.name for s in k.body if isinstance(s, ir.Let)]


def _same_meaning(k: ir.Kernel, moved: ir.Kernel, dims, point) -> None:
    rng = np.random.default_rng(sum(dims.values()))
    b = binding.bind(k, dims, None, point)
    arrays, scalars = random_inputs(k, dict(b.env), rng)
    want = {n: a.copy() for n, a in arrays.items()}
    got = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(k, b, want, scalars)
    interp.run_kernel(moved, binding.bind(moved, dims, None, point), got, scalars)
    for n in walk.stored_tensors(k):
        np.testing.assert_array_equal(got[n], want[n])


@pytest.mark.parametrize("case", sorted(MOVED))
@pytest.mark.parametrize("dims", DIMS)
def test_a_moved_let_means_the_same(case, dims):
    k = _kernel(HEAD + MOVED[case])
    moved = inline_epilogue_lets(k)
    assert _top_lets(moved) == [], _top_lets(moved)
    _same_meaning(k, moved, dims, POINT)


@pytest.mark.parametrize("case", sorted(KEPT))
def test_a_let_it_must_not_move_stays(case):
    k = _kernel(HEAD + KEPT[case])
    assert inline_epilogue_lets(k) is k


def test_linear_relu_keeps_its_widest_tile():
    """With z held beside acc the 128 x 256 point held 256 values per thread and was pruned."""
    k = _kernel(LINEAR_RELU)
    assert _top_lets(inline_epilogue_lets(k)) == []
    _same_meaning(k, inline_epilogue_lets(k), {"M": 100, "N": 136, "K": 40},
                  {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32})
    b = binding.bind(k, {"M": 8192, "N": 8192, "K": 8192}, None, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64})
    schedule = Schedule(wgmma=True, stages=4, order="grouped", tma=True)
    stages.run(k, b, stages.Options(False, schedule, 90), until="emit")  # not pruned
