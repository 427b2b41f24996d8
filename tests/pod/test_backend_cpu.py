"""The CPU backend: leaves on the interpreter, parameters in their declared dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from pod.backend_cpu import CpuBackend
from schemas.capnp_io import JobProgram
from schemas.program import Leaf

MIXED = """
@autotune(BLOCK in [8])
kernel scale(x: tensor<bf16>[N], y: tensor<f16>[N], alpha: f32) {
  let base = ctx.block.x * BLOCK
  y[base :+ BLOCK] = alpha * x[base :+ BLOCK]
}
"""


def test_non_f32_parameters_get_converted_copies_and_written_ones_come_back():
    leaf = Leaf(name="main", kernel="scale", source=MIXED, dims=(("N", 16),), tile_values=(("BLOCK", 8),),
                grid=(2,), threads=256, tensors=("x", "y"), scalars=("alpha",))
    backend = CpuBackend()
    writes = backend.prepare("j", JobProgram(kernel="scale", leaves=(leaf,), scalars=(("alpha", 3.0),),
                                              tensors=()))
    assert writes == {"main": ("y",)}  # worked out from the source when the program does not say
    x = backend.allocate((16,))
    y = backend.allocate((16,))
    values = np.linspace(-2, 2, 16, dtype=np.float32)
    backend.upload(x, values)
    backend.compute("j", "main", {"x": x, "y": y}, {"alpha": 3.0})
    # the leaf computes in f32 from the bf16 copy of x and stores f16: mirror both roundings
    want = (3.0 * values.astype(ml_dtypes.bfloat16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(backend.download(y), want.astype(np.float32))
    np.testing.assert_array_equal(backend.download(x), values)  # a read-only parameter is untouched
    backend.forget("j")
