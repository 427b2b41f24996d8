"""The on-disk PTX cache (compiler/cuda/nvrtc.py under common/cache.py's folder): a leaf compiled
once is taken from disk by a later process, keyed by source, options and NVRTC version."""

from __future__ import annotations

import pytest

from common import cache, log
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
    assert len(files) == 1 and files[0].read_text() == nvrtc.entry_text(ptx)
    assert files[0].read_text().startswith(f"// {nvrtc.ENTRY_FORMAT} sha256=")
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


def _truncated(entry: bytes) -> bytes:
    return entry[: len(entry) // 2]


def _one_byte_changed(entry: bytes) -> bytes:
    at = entry.index(b".entry") + 20  # inside the kernel's body: the PTX still names an entry
    return entry[:at] + bytes([entry[at] ^ 0x01]) + entry[at + 1 :]


CORRUPTIONS = {
    "garbage text": lambda entry: b"garbage",
    "random bytes": lambda entry: bytes(range(256)) * 4,
    "empty": lambda entry: b"",
    "truncated": _truncated,
    "one byte changed": _one_byte_changed,
    "header only": lambda entry: entry.partition(b"\n")[0] + b"\n",
    "PTX without the header": lambda entry: entry.partition(b"\n")[2],
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_corrupted_cache_file_is_detected_compiled_again_and_rewritten_with_a_warning(
        fresh, monkeypatch, capsys, corruption):
    ptx = nvrtc.compile_to_ptx(SOURCE)
    (path,) = (fresh / "ptx").glob("*.ptx")
    good = path.read_bytes()
    path.write_bytes(CORRUPTIONS[corruption](good))
    monkeypatch.setattr(nvrtc, "_cache", {})
    compiled = []
    real_compile = nvrtc._compile
    monkeypatch.setattr(nvrtc, "_compile", lambda *args: compiled.append(1) or real_compile(*args))
    log.configure("warning")  # as every program's main does: warnings to stderr
    capsys.readouterr()
    assert nvrtc.compile_to_ptx(SOURCE) == ptx
    assert compiled == [1]  # rebuilt, not taken from the file
    assert path.read_bytes() == good  # and the entry rewritten whole
    err = capsys.readouterr().err
    assert "compile cache entry is corrupted; compiling it again" in err and str(path) in err
    monkeypatch.setattr(nvrtc, "_cache", {})
    assert nvrtc.compile_to_ptx(SOURCE) == ptx and compiled == [1]  # the rewritten entry is good
    assert "corrupted" not in capsys.readouterr().err


def test_a_missing_entry_is_compiled_without_a_warning(fresh, capsys):
    log.configure("warning")
    nvrtc.compile_to_ptx(SOURCE)
    assert "corrupted" not in capsys.readouterr().err


def test_errors_are_not_cached(fresh):
    with pytest.raises(nvrtc.NvrtcError):
        nvrtc.compile_to_ptx("this is not CUDA")
    assert not list((fresh / "ptx").glob("*.ptx")) if (fresh / "ptx").exists() else True
