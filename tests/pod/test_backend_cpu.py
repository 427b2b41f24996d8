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


def test_a_buffer_nothing_references_is_reused_zeroed_and_one_still_referenced_is_not():
    backend = CpuBackend()
    first = backend.allocate((1 << 18, 2))  # 2 MiB: large enough to be kept for reuse
    first[...] = 7
    memory = first.__array_interface__["data"][0]
    still_read = memoryview(first.reshape(-1)[3:])  # as a store or a data-port send would hold it
    del first
    second = backend.allocate((1 << 18, 2))
    assert second.__array_interface__["data"][0] != memory  # the memoryview still reads it
    assert not second.any()
    del still_read
    third = backend.allocate((1 << 19,), "i32")  # same size, another shape and dtype
    assert third.__array_interface__["data"][0] == memory and third.dtype == np.int32
    assert not third.any()  # zeroed again
    del second, third
    backend.forget("j")  # a job's end keeps idle memory up to its bound: here all of it
    assert backend.allocate((1 << 18, 2)).__array_interface__["data"][0] in _blocks(backend)


def test_idle_memory_beyond_the_bound_is_let_go(monkeypatch):
    backend = CpuBackend()
    monkeypatch.setattr(backend._buffers, "IDLE_BYTES", 3 << 20)
    buffers = [backend.allocate((1 << 18, 2)) for _ in range(3)]  # 6 MiB, all in use
    assert len(_blocks(backend)) == 3
    del buffers
    backend.forget("j")
    assert len(_blocks(backend)) == 1  # 2 MiB kept of the 3 allowed


def _blocks(backend) -> list[int]:
    return [b.__array_interface__["data"][0] for blocks in backend._buffers._blocks.values() for b in blocks]
