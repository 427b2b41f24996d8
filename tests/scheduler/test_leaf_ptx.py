"""The scheduler's PTX of a job's leaves (scheduler/leaf_ptx.py): compiled once, then taken from
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
from scheduler import leaf_ptx
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


def test_a_later_command_takes_the_leaves_ptx_without_the_generator(fresh):
    ptx = leaf_ptx.leaf_ptx(program())
    assert ".entry" in ptx["main"]
    (stored,) = (fresh / "leaf-ptx").glob("*.json")
    assert json.loads(stored.read_text()) == ptx
    # a new process (a later command): the same PTX, and compiler.cuda's generator never imported
    probe = ("import json, sys; from scheduler import leaf_ptx;"
             "from tests.scheduler.test_leaf_ptx import program; ptx = leaf_ptx.leaf_ptx(program());"
             "print(json.dumps([ptx, sorted(m for m in sys.modules if m.startswith('compiler.cuda'))]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, cache.ENV: str(fresh), "PYTHONPATH": str(REPO)})
    again, imported = json.loads(done.stdout)
    assert again == ptx
    assert imported == ["compiler.cuda", "compiler.cuda.nvrtc"], imported


def test_other_leaves_are_compiled_and_kept_beside(fresh):
    small, big = leaf_ptx.leaf_ptx(program(16)), leaf_ptx.leaf_ptx(program(4096))
    assert small != big
    assert len(list((fresh / "leaf-ptx").glob("*.json"))) == 2


def test_a_broken_or_partial_cache_file_is_compiled_again(fresh):
    ptx = leaf_ptx.leaf_ptx(program())
    (stored,) = (fresh / "leaf-ptx").glob("*.json")
    for broken in ("garbage", json.dumps({"main": "no entry here"}), json.dumps({"other": ptx["main"]})):
        stored.write_text(broken)
        assert leaf_ptx.leaf_ptx(program()) == ptx
        assert json.loads(stored.read_text()) == ptx


def test_a_dump_of_the_compilers_stages_compiles_anew(fresh, monkeypatch):
    leaf_ptx.leaf_ptx(program())
    compiled = []
    monkeypatch.setattr(leaf_ptx, "compile_leaves", lambda p: compiled.append(p) or {"main": ".entry x"})
    assert leaf_ptx.leaf_ptx(program())["main"] != ".entry x"  # from disk
    monkeypatch.setenv("PHOBOS_CUDA_DUMP", str(fresh / "dump"))
    assert leaf_ptx.leaf_ptx(program()) == {"main": ".entry x"} and len(compiled) == 1
