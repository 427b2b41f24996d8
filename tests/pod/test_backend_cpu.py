"""The CPU backend: leaves on the interpreter, parameters in their declared dtypes."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np

from pod.backends import host_buffers
from pod.backends.backend_cpu import CpuBackend
from pod.backends.backend_cpu import prepare_leaf as _real_prepare
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


def test_a_buffer_nothing_references_is_reused_and_one_still_referenced_is_not():
    backend = CpuBackend()
    first = backend.allocate((1 << 18, 2))  # 2 MiB: large enough to be kept for reuse
    first[...] = 7
    memory = _address(first)
    still_read = memoryview(first.reshape(-1)[3:])  # as a store or a data-port send would hold it
    del first
    second = backend.allocate((1 << 18, 2))
    assert _address(second) != memory  # the memoryview still reads it
    del still_read
    third = backend.allocate((1 << 19,), "i32")  # same size, another shape and dtype
    assert _address(third) == memory and third.dtype == np.int32
    del second, third
    backend.forget("j")  # a job's end keeps idle memory up to its bound: here all of it
    assert _address(backend.allocate((1 << 18, 2))) in _blocks(backend)


ACCUMULATE = """
@autotune(BLOCK in [65536])
kernel accumulate(x: tensor<f32>[N], y: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  y[base :+ BLOCK] = y[base :+ BLOCK] + x[base :+ BLOCK]
}
"""
BIG = 1 << 19  # 2 MiB of f32: kept for reuse


def test_reused_memory_reads_as_zeros_unless_written_whole_first():
    """Every way of using a buffer sees zeros in reused memory (a leaf, a store, a serve, a
    fetch writing into it), but a load or an upload, which write all of it, keep what they
    wrote: the zeroing, put off until the first use, is skipped for them."""
    backend = CpuBackend()
    leaf = Leaf(name="main", kernel="accumulate", source=ACCUMULATE, dims=(("N", BIG),),
                tile_values=(("BLOCK", 65536),), grid=(BIG // 65536,), threads=256, tensors=("x", "y"),
                scalars=())
    backend.prepare("j", JobProgram(kernel="accumulate", leaves=(leaf,), scalars=(), tensors=()))
    for use in ("compute", "drain", "download", "host_view", "fill", "upload"):
        buffer = _reused(backend)
        if use == "compute":  # y = y + x, with y's reused memory read as zeros
            x = backend.allocate((BIG,))
            backend.upload(x, np.ones(BIG, np.float32))
            backend.compute("j", "main", {"x": x, "y": buffer}, {})
            seen, want = buffer, 1
        elif use == "drain":
            seen, want = backend.drain(buffer, lambda host, first, count: host.copy())[0], 0
        elif use == "fill":
            backend.fill(buffer, lambda host, first, count: host.fill(2) or host.nbytes)
            seen, want = backend.download(buffer), 2
        elif use == "upload":
            backend.upload(buffer, np.full(BIG, 3, np.float32))
            seen, want = backend.download(buffer), 3
        else:
            seen, want = getattr(backend, use)(buffer), 0
        assert (seen == want).all(), use
        del buffer, seen
    backend.forget("j")


def _reused(backend) -> np.ndarray:
    """A buffer taking the memory of an earlier one, which held 5s."""
    earlier = backend.allocate((BIG,))
    memory = _address(earlier)
    earlier[...] = 5
    del earlier
    buffer = backend.allocate((BIG,))
    assert _address(buffer) == memory
    return buffer


def test_idle_memory_beyond_the_bound_is_let_go():
    backend = CpuBackend()
    backend._buffers.idle_bytes = 3 << 20
    buffers = [backend.allocate((1 << 18, 2)) for _ in range(3)]  # 6 MiB, all in use
    assert len(_blocks(backend)) == 3
    del buffers
    backend.forget("j")
    assert len(_blocks(backend)) == 1  # 2 MiB kept of the 3 allowed


def test_a_new_buffer_is_its_own_memory_when_idle_blocks_fill_the_bound():
    """A buffer allocated while idle blocks of other sizes use up the bound is not let go at
    once (the trim that follows its allocation must not count it idle): it is neither another
    buffer's memory, still in use, nor missing, and one larger than the whole bound works."""
    backend = CpuBackend()
    backend._buffers.idle_bytes = 6 << 20
    small = [backend.allocate((1 << 19,)) for _ in range(2)]  # 2 MiB each
    used = backend.allocate((1 << 20,))  # 4 MiB, in use
    used[...] = 7
    del small  # 4 MiB of idle blocks, 2 MiB left of the bound
    another = backend.allocate((1 << 20,))
    assert not np.shares_memory(another, used) and (another == 0).all()
    huge = backend.allocate((1 << 21,))  # 8 MiB: more than the bound
    assert huge.shape == (1 << 21,) and (huge == 0).all()


def test_a_second_first_use_waits_for_the_zeros(monkeypatch):
    """Two threads using a reused buffer first at once (a serve's read beside a leaf's) both see
    zeros: the second waits for the first's zeroing instead of reading the earlier values."""
    backend = CpuBackend()
    buffer = _reused(backend)
    halfway, go = threading.Event(), threading.Event()

    def held_zero(array):  # the first zeroing, held halfway
        array[:BIG // 2] = 0
        halfway.set()
        assert go.wait(30)
        array[BIG // 2:] = 0

    monkeypatch.setattr(host_buffers, "_zero", held_zero)
    seen = []
    first = threading.Thread(target=backend.download, args=(buffer,))
    first.start()
    assert halfway.wait(30)
    second = threading.Thread(target=lambda: seen.append(backend.download(buffer).copy()))
    second.start()
    second.join(1.0)  # without the wait it reads now, the earlier values in its second half
    go.set()
    first.join(30)
    second.join(30)
    assert (seen[0] == 0).all()


def _address(array) -> int:
    return array.__array_interface__["data"][0]


def _blocks(backend) -> list[int]:
    return [_address(b) for blocks in backend._buffers._blocks.values() for b in blocks]


def test_buffers_start_on_a_page_for_direct_stores_and_on_a_huge_page_from_2_mib():
    """A store writes a buffer's long runs to the disk straight from its memory (stores_direct),
    which must start on a disk block: fresh and reused buffers start on a page; those of 2 MiB
    or more on a 2 MiB boundary, where every 2 MiB of them can be one transparent huge page."""
    backend = CpuBackend()
    assert backend.stores_direct
    fresh = [backend.allocate((BIG,)) for _ in range(3)]  # 2 MiB
    assert all(_address(b) % (2 << 20) == 0 for b in fresh)
    assert _address(_reused(backend)) % (2 << 20) == 0
    smaller = [backend.allocate((3 << 18,)) for _ in range(3)]  # 1.5 MiB: kept for reuse too
    assert all(_address(b) % 4096 == 0 for b in smaller)


def test_a_leaf_is_parsed_once_for_job_after_job(monkeypatch):
    """A pod serving job after job of one kernel parses its leaf for the first job only; another
    leaf (other dims) is parsed for its own; the earliest leaves go beyond KEPT_LEAVES."""
    from pod.backends import backend_cpu

    parsed = []
    monkeypatch.setattr(backend_cpu, "prepare_leaf", lambda leaf: parsed.append(leaf) or _real_prepare(leaf))
    monkeypatch.setattr(backend_cpu, "KEPT_LEAVES", 2, raising=False)
    backend = CpuBackend()

    def job(job_id: str, n: int) -> None:
        leaf = Leaf(name="main", kernel="scale", source=MIXED, dims=(("N", n),), tile_values=(("BLOCK", 8),),
                    grid=(n // 8,), threads=256, tensors=("x", "y"), scalars=("alpha",))
        program = JobProgram(kernel="scale", leaves=(leaf,), scalars=(("alpha", 2.0),), tensors=())
        backend.prepare(job_id, program)
        x, y = backend.allocate((n,)), backend.allocate((n,))
        backend.upload(x, np.ones(n, np.float32))
        backend.compute(job_id, "main", {"x": x, "y": y}, {"alpha": 2.0})
        np.testing.assert_array_equal(backend.download(y), np.full(n, 2.0, np.float32))
        backend.forget(job_id)

    job("j1", 16)
    job("j2", 16)
    assert [dict(leaf.dims)["N"] for leaf in parsed] == [16]
    job("j3", 32)
    job("j4", 16)
    assert [dict(leaf.dims)["N"] for leaf in parsed] == [16, 32]
    job("j5", 64)  # a third leaf: the least recently used one (N=32) goes
    job("j6", 32)
    assert [dict(leaf.dims)["N"] for leaf in parsed] == [16, 32, 64, 32]
