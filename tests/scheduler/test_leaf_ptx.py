"""The scheduler's compiled leaves of a job (scheduler/running/leaf_ptx.py): compiled once, then taken from
disk by a later command without the CUDA code generator, keyed by what the source is made of.
Needs NVRTC (nvidia-cuda-nvrtc), not a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common import cache
from scheduler.running import leaf_ptx
from schemas.program import Leaf

REPO = Path(__file__).resolve().parents[2]
SOURCE = """
@autotune(BLOCK in [16, 4096])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""


def program(block: int = 16) -> SimpleNamespace:
    n = 4096
    leaf = Leaf(name="main", kernel="add", source=SOURCE, dims=(("N", n),), tile_values=(("BLOCK", block),),
                grid=(n // block,), threads=256, tensors=("a", "b", "c"), scalars=())
    return SimpleNamespace(leaves=(leaf,))


@pytest.fixture()
def fresh(monkeypatch, tmp_path):
    try:
        from compiler.cuda import nvrtc

        nvrtc.version()
    except (RuntimeError, OSError) as err:
        pytest.skip(f"no NVRTC here: {err}")
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    return tmp_path


def ptx_of(compiled: dict) -> dict[str, str]:
    return {name: leaf.code.decode() for name, leaf in compiled.items()}


def test_a_later_command_takes_the_leaves_ptx_without_the_generator(fresh):
    compiled = leaf_ptx.compiled_leaves(program())
    ptx = ptx_of(compiled)
    assert ".entry" in ptx["main"] and compiled["main"].kernels[0].entry in ptx["main"]
    assert compiled["main"].tensors[0].shape == (4096,) and compiled["main"].tuned == (("BLOCK", 16),)
    (stored,) = (fresh / "leaf-ptx").glob("*.json")
    assert set(json.loads(stored.read_text())) == {"main"}
    # a new process (a later command): the same leaves, and compiler.cuda's generator never imported
    probe = ("import json, sys; from scheduler.running import leaf_ptx;"
             "from tests.scheduler.test_leaf_ptx import program, ptx_of;"
             "c = leaf_ptx.compiled_leaves(program()); ptx = ptx_of(c);"
             "cuda = sorted(m for m in sys.modules if m.startswith('compiler.cuda'));"
             "print(json.dumps([ptx, repr(c), cuda]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, cache.ENV: str(fresh), "PYTHONPATH": str(REPO)})
    again, again_repr, imported = json.loads(done.stdout)
    assert again == ptx and again_repr == repr(compiled)
    assert imported == ["compiler.cuda", "compiler.cuda.nvrtc", "compiler.cuda.target"], imported


def test_other_leaves_are_compiled_and_kept_beside(fresh):
    small, big = leaf_ptx.compiled_leaves(program(16)), leaf_ptx.compiled_leaves(program(4096))
    assert small != big
    assert len(list((fresh / "leaf-ptx").glob("*.json"))) == 2


def test_a_broken_or_partial_cache_file_is_compiled_again(fresh):
    compiled = leaf_ptx.compiled_leaves(program())
    (stored,) = (fresh / "leaf-ptx").glob("*.json")
    good = stored.read_text()
    entry = json.loads(good)["main"]
    for broken in ("garbage", json.dumps({"main": "no entry here"}), json.dumps({"main": entry[:40]}),
                   json.dumps({"main": 7}), json.dumps({"other": entry})):
        stored.write_text(broken)
        assert leaf_ptx.compiled_leaves(program()) == compiled
        assert stored.read_text() == good


def test_a_dump_of_the_compilers_stages_compiles_anew(fresh, monkeypatch):
    leaf_ptx.compiled_leaves(program())
    compiled = []
    monkeypatch.setattr(leaf_ptx, "compile_leaves", lambda p, cc: compiled.append(p) or {"main": ".entry x"})
    assert leaf_ptx.compiled_leaves(program())["main"] != ".entry x"  # from disk
    monkeypatch.setenv("PHOBOS_CUDA_DUMP", str(fresh / "dump"))
    assert leaf_ptx.compiled_leaves(program()) == {"main": ".entry x"} and len(compiled) == 1


MATMUL_BF16 = (REPO / "examples" / "matmul_bf16.phk").read_text()


def bf16_program() -> SimpleNamespace:
    """A leaf whose dot runs on tensor cores (mma.sync with the default schedule: sm_80)."""
    leaf = Leaf(name="mm", kernel="matmul_bf16", source=MATMUL_BF16,
                dims=(("M", 256), ("N", 256), ("K", 256)),
                tile_values=(("TILE_M", 64), ("TILE_N", 64), ("TILE_K", 32)), grid=(4, 4), threads=256,
                tensors=("A", "B", "C"), scalars=())
    return SimpleNamespace(leaves=(leaf,))


def _target(ptx: str) -> str:
    (line,) = [ln for ln in ptx.splitlines() if ln.startswith(".target")]
    return line.split()[1]


def test_each_pod_gets_the_leaves_compiled_for_its_gpu(fresh):
    """An A100, an RTX 3090, an H200, a Blackwell and a pod too old to say: one compile per kind of
    GPU, each its own disk entry; sm_90 PTX where a GPU runs it forward or the pod did not say."""
    pods = {0: (80, "node 0"), 1: (86, "node 1"), 2: (90, "node 2"), 3: (80, "node 3"), 4: (100, "node 4"),
            5: (0, "node 5")}
    compiled = leaf_ptx.leaves_for_pods(bf16_program(), pods)
    ptx = {node: ptx_of(leaves) for node, leaves in compiled.items()}
    targets = {node: _target(p["mm"]) for node, p in ptx.items()}
    assert targets == {0: "sm_80", 1: "sm_86", 2: "sm_90", 3: "sm_80", 4: "sm_90", 5: "sm_90"}
    assert compiled[0] is compiled[3] and compiled[2] is compiled[5]  # one compile per capability
    assert all("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in p["mm"] for p in ptx.values())
    assert len(list((fresh / "leaf-ptx").glob("*.json"))) == 4  # 80, 86, 90, 100: the arch is in the key
    assert leaf_ptx.leaves_for_pods(bf16_program(), {}) == {}  # CPU pods only: nothing to compile


def test_a_pod_whose_gpu_cannot_run_a_leaf_fails_the_job_at_the_dot(fresh):
    from compiler.frontend.diagnostics import CompileError

    pods = {0: (90, "node 0 (h:1, NVIDIA H200)"), 1: (75, "node 1 (h:2, Tesla T4)")}
    with pytest.raises(CompileError) as err:
        leaf_ptx.leaves_for_pods(bf16_program(), pods)
    assert "compute capability 8.0 or later for tensor cores" in err.value.message
    assert "this GPU has compute capability 7.5" in err.value.message
    assert err.value.span.line == 10 and "node 1 (h:2, Tesla T4)" in err.value.note
    assert "NVIDIA H200" not in err.value.note
    rendered = err.value.render()
    assert rendered.startswith("<cluster leaf mm>:10:12: error: this kernel cannot run on this GPU"), rendered
