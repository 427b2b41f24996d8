"""The on-disk PTX cache (compiler/cuda/nvrtc.py under common/cache.py's folder): a leaf compiled
once is taken from disk by a later process, keyed by source, options and NVRTC version."""

from __future__ import annotations

import pytest

from common import cache
from compiler.cuda import nvrtc

SOURCE = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n'


@pytest.fixture()
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    monkeypatch.setattr(nvrtc, "_cache", {})  # as a new process would start
    return tmp_path


def test_a_compiled_leaf_is_read_back_from_disk(fresh, monkeypatch):
    ptx = nvrtc.compile_to_ptx(SOURCE)
    files = list((fresh / "ptx").glob("*.ptx"))
    assert len(files) == 1 and files[0].read_text() == ptx
    monkeypatch.setattr(nvrtc, "_cache", {})

    def no_nvrtc(*args):
        raise AssertionError("NVRTC ran although the PTX was on disk")

    monkeypatch.setattr(nvrtc, "_compile", no_nvrtc)
    assert nvrtc.compile_to_ptx(SOURCE) == ptx


def test_other_source_or_options_compile_anew(fresh):
    nvrtc.compile_to_ptx(SOURCE)
    nvrtc.compile_to_ptx(SOURCE.replace("1.0f", "2.0f"))
    nvrtc.compile_to_ptx(SOURCE, options=("-std=c++17",))
    assert len(list((fresh / "ptx").glob("*.ptx"))) == 3


def test_a_broken_cache_file_is_compiled_again(fresh, monkeypatch):
    ptx = nvrtc.compile_to_ptx(SOURCE)
    (path,) = (fresh / "ptx").glob("*.ptx")
    path.write_text("garbage")
    monkeypatch.setattr(nvrtc, "_cache", {})
    assert nvrtc.compile_to_ptx(SOURCE) == ptx
    assert path.read_text() == ptx


def test_errors_are_not_cached(fresh):
    with pytest.raises(nvrtc.NvrtcError):
        nvrtc.compile_to_ptx("this is not CUDA")
    assert not list((fresh / "ptx").glob("*.ptx")) if (fresh / "ptx").exists() else True
