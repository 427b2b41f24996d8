"""A GPU pod handed a compiled leaf (schemas/compiled_leaf.py) launches it as it is: its
preparation, up to the driver's module load, never parses the leaf, generates CUDA or calls
NVRTC (pod/backends/gpu_leaves.py). Needs NVRTC to make the leaf the scheduler would ship, not a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import cache
from common.errors import UserError
from compiler.cuda.mainloops.split_loop.launch import compile_leaf, compile_sequence, module_ptx
from pod.backends import gpu_leaves
from schemas import capnp_io
from schemas.program import Leaf

REPO = Path(__file__).resolve().parents[2]
MATMUL_BF16 = (REPO / "examples" / "matmul_bf16.phk").read_text()
GENERATOR = ("compiler.cuda.codegen", "compiler.cuda.stages", "compiler.cuda.nvrtc",
             "compiler.frontend.parser", "compiler.frontend.check", "compiler.cluster.leaves")


def matmul_leaf(m: int = 256) -> Leaf:
    return Leaf(name="mm", kernel="matmul_bf16", source=MATMUL_BF16, dims=(("M", m), ("N", 256), ("K", 256)),
                tile_values=(("TILE_M", 64), ("TILE_N", 64), ("TILE_K", 32)), grid=(m // 64, 4), threads=256,
                tensors=("A", "B", "C"), scalars=())


@pytest.fixture()
def shipped(monkeypatch, tmp_path):
    """The leaf as the scheduler ships it, after a trip through the program message."""
    try:
        from compiler.cuda import nvrtc

        nvrtc.version()
    except (RuntimeError, OSError) as err:
        pytest.skip(f"no NVRTC here: {err}")
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    leaf = matmul_leaf()
    program = capnp_io.JobProgram(kernel="matmul_bf16", leaves=(leaf,), scalars=(), tensors=(),
                                  compiled=(("mm", compile_leaf(leaf, 90)),))
    back = capnp_io.program_from_bytes(capnp_io.program_to_bytes(program))
    assert back == program
    return leaf, dict(back.compiled)["mm"]


def _forbid(monkeypatch, calls: list) -> None:
    from compiler.cluster import leaves
    from compiler.cuda import nvrtc, stages
    from compiler.frontend import parser

    for module, name in ((stages, "run"), (stages, "ptx_of"), (nvrtc, "compile_to_ptx"),
                         (parser._Parser, "module"), (leaves, "load_leaf")):
        monkeypatch.setattr(module, name, lambda *a, _n=name, **k: calls.append(_n) or pytest.fail(_n))


def test_a_shipped_leaf_is_prepared_without_a_compile(shipped, monkeypatch):
    leaf, compiled = shipped
    calls: list[str] = []
    _forbid(monkeypatch, calls)
    prepared = gpu_leaves.gpu_leaf(leaf, compiled, 90)
    assert calls == []
    # what compiler.cuda.launch loads and launches is what a compile here would have made
    monkeypatch.undo()
    from compiler.cluster.leaves import load_leaf

    kernel, binding = load_leaf(leaf)
    sequence = compile_sequence(kernel, binding, cc=90)
    assert len(prepared.kernels) == len(sequence.kernels) == len(compiled.kernels)
    assert compiled.scratch == sequence.scratch
    fields = ("entry", "params", "grid", "block", "shared_bytes", "scalars", "tensor_maps")
    for launched, here in zip(prepared.kernels, sequence.kernels, strict=True):
        for field in fields:
            assert getattr(launched, field) == getattr(here, field), field
        assert launched.ptx == module_ptx(sequence, 90) and launched.tensors == ("A", "B", "C")
        assert set(launched.need.features) <= set(sequence.need.features) and launched.cuda_source == ""
    assert [(t.name, t.dtype, t.shape) for t in compiled.tensors] == [
        ("A", "bf16", (256, 256)), ("B", "bf16", (256, 256)), ("C", "f32", (256, 256))]
    assert compiled.writes == ("C",) and compiled.tuned == leaf.tile_values and compiled.cc == 90


class _Device:
    """cupy.cuda.Device as GpuBackend uses it, for a GPU of capability 9.0 that is not here."""

    compute_capability = "90"

    def __init__(self, index: int):
        self.index = index

    def use(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


@pytest.fixture()
def gpu_backend(monkeypatch):
    """The pod's real GPU backend over a stand-in for cupy: its `prepare` runs as on a GPU host,
    up to the driver's module load (compiler.cuda.launch.load, recorded here instead)."""
    import types

    from compiler.cuda import launch

    cuda = types.SimpleNamespace(Device=_Device, Stream=lambda non_blocking: object())
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    loaded: list = []
    monkeypatch.setattr(launch, "load", loaded.append)
    from pod.backends.backend_gpu import GpuBackend

    return GpuBackend(0), loaded


def _compiles(monkeypatch) -> list[str]:
    """The parse, CUDA generation and NVRTC calls made from now on, by name, in order."""
    from compiler.cuda import nvrtc, stages
    from compiler.frontend import parser

    calls: list[str] = []
    for module, name in ((stages, "run"), (nvrtc, "compile_to_ptx"), (parser._Parser, "module")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    return calls


def test_the_gpu_backend_prepares_a_shipped_leaf_without_a_compile(shipped, gpu_backend, monkeypatch):
    """A job's program with the compiled leaf: the backend loads its PTX, and nothing reaches the
    parser, the CUDA generator or NVRTC; the same program without it compiles here (so the count
    sees a compile when there is one)."""
    leaf, compiled = shipped
    backend, loaded = gpu_backend
    from compiler.cluster.leaves import forget_leaf_kernels

    calls = _compiles(monkeypatch)
    program = capnp_io.JobProgram(kernel="matmul_bf16", leaves=(leaf,), scalars=(), tensors=(),
                                  compiled=(("mm", compiled),))
    assert backend.prepare("shipped", program) == {"mm": ("C",)}
    assert calls == []
    assert [k.ptx for k in loaded] == [k.ptx for k in gpu_leaves.gpu_leaf(leaf, compiled, 90).kernels]
    assert loaded[0].ptx.encode() == compiled.code and loaded[0].entry == compiled.kernels[0].entry
    forget_leaf_kernels()  # a pod process has only the leaf's text
    backend.prepare("compiled-here", capnp_io.JobProgram(kernel="matmul_bf16", leaves=(leaf,), scalars=(),
                                                         tensors=(), compiled=()))
    assert {"module", "run", "compile_to_ptx"} <= set(calls), calls


def test_a_pod_process_never_loads_the_generator_for_a_shipped_leaf(shipped, tmp_path):
    leaf, compiled = shipped
    program = capnp_io.JobProgram(kernel="matmul_bf16", leaves=(leaf,), scalars=(), tensors=(),
                                  compiled=(("mm", compiled),))
    message = tmp_path / "program.bin"
    message.write_bytes(capnp_io.program_to_bytes(program))
    probe = ("import json, sys; from pathlib import Path;"
             "from schemas import capnp_io; from pod.backends import gpu_leaves;"
             f"p = capnp_io.program_from_bytes(Path({str(message)!r}).read_bytes());"
             "g = gpu_leaves.gpu_leaf(p.leaves[0], dict(p.compiled)['mm'], 90);"
             "print(json.dumps([g.kernels[0].entry, sorted(sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    entry, modules = json.loads(done.stdout)
    assert entry == compiled.kernels[0].entry
    assert [m for m in GENERATOR if m in modules] == []


def test_a_leaf_sent_without_its_compiled_form_is_compiled_by_the_pod_alike(shipped):
    leaf, compiled = shipped
    assert gpu_leaves.gpu_leaf(leaf, None, 90).compiled == compiled


def test_a_compiled_leaf_of_another_leaf_is_refused(shipped):
    leaf, compiled = shipped
    with pytest.raises(UserError, match="compiled from another leaf"):
        gpu_leaves.gpu_leaf(matmul_leaf(128), compiled, 90)


def test_a_split_leaf_ships_its_launches_and_their_scratch(monkeypatch, tmp_path):
    """A decode leaf of one CTA: the cost model splits its loop; the compiled leaf holds the
    partial, merge-tree (compiler/cuda/mainloops/split_loop/tree.py) and combine entries of one module, in
    order, and the partials' scratch: the partial kernel's set and the tree's."""
    from benchmarks.decode_kernel import decode_text

    try:
        from compiler.cuda import nvrtc

        nvrtc.version()
    except (RuntimeError, OSError) as err:
        pytest.skip(f"no NVRTC here: {err}")
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    leaf = Leaf(name="dec", kernel="decode", source=decode_text("bf16", 16, "64"),
                dims=(("G", 16), ("S", (1 << 16) + 3)), tile_values=(("D", 128), ("BG", 16), ("BS", 64)),
                grid=(1,), threads=256, tensors=("Q", "K", "V", "O"), scalars=("scale",))
    monkeypatch.setenv("PHOBOS_SPLIT_FAN_IN", "8")
    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "0")  # the tree's form (the cost model takes one launch)
    compiled = compile_leaf(leaf, 90)
    chunks = compiled.kernels[0].grid[1]
    assert chunks > 8  # the cost model's factor at S = 2^16: a tree of two levels
    entries = ["partial", "merge0", "merge1", "combine"]
    assert [k.entry for k in compiled.kernels] == [f"phobos_decode__split_{e}" for e in entries]
    names = [s.name for s in compiled.scratch]
    assert names == ["m_part", "l_part", "acc_part", "m_part_tree", "l_part_tree", "acc_part_tree"]
    assert compiled.scratch[2].shape == (chunks, 16, 128)
    assert compiled.kernels[-1].grid == (1, 1, 1)
    for k in compiled.kernels:
        assert set(names[:3]) <= set(k.params) and f".entry {k.entry}" in compiled.code.decode()
    assert all(set(names[3:]) <= set(k.params) for k in compiled.kernels[1:3])
    back = capnp_io.program_from_bytes(capnp_io.program_to_bytes(capnp_io.JobProgram(
        kernel="decode", leaves=(leaf,), scalars=(), tensors=(), compiled=(("dec", compiled),))))
    prepared = gpu_leaves.gpu_leaf(leaf, dict(back.compiled)["dec"], 90)
    assert [k.entry for k in prepared.kernels] == [k.entry for k in compiled.kernels]
