"""ctypes bindings to NVRTC: CUDA C++ text -> PTX, with no GPU needed.

The library is found automatically, in this order: $PHOBOS_NVRTC (a path), the
`nvidia-cuda-nvrtc-cu12` wheel (nvidia/cuda_nvrtc/lib/libnvrtc.so.12), the cu13 wheel
(nvidia/cu13/lib/libnvrtc.so.13), $CUDA_HOME/lib64 and /usr/local/cuda*/lib64.
Compiled PTX is cached in memory per (source text, options): the runtime compiles the same leaf
for many units of work; and on disk (common/cache.py, `ptx/`), keyed by a hash of the source, the
options and NVRTC's version, so that a job compiles no leaf an earlier job compiled already.
Each file starts with a line holding the sha256 and length of the PTX after it (ENTRY_FORMAT): an
entry that does not match (truncated, overwritten, flipped bits, written by hand) is corrupted; it
is compiled again and rewritten, with a warning naming the file.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import re
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from common import cache, log
from common import options as env_options

DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo", "--use_fast_math")
ENTRY_FORMAT = "phobos-ptx/2"  # the first line of a cache file: f"// {ENTRY_FORMAT} sha256=HEX bytes=N"
_log = log.get_logger(program="compiler")


class NvrtcError(Exception):
    """NVRTC refused the generated source; `log` is its message, `source` what it was given."""

    def __init__(self, log: str, source: str):
        super().__init__(log)
        self.log = log
        self.source = source


@dataclass(frozen=True)
class LogError:
    """One `file(LINE): error: text` line of an NVRTC log."""

    line: int
    text: str


_LOG_LINE = re.compile(r"^[^\s(]*\((\d+)\): (error|catastrophic error): (.*)$")


def parse_log(log: str) -> list[LogError]:
    return [LogError(int(m.group(1)), m.group(3)) for m in map(_LOG_LINE.match, log.splitlines()) if m]


def _candidates() -> list[str]:
    found: list[str] = []
    settings = env_options.current()
    if settings.nvrtc:
        found.append(settings.nvrtc)
    for base in sys.path:
        if not base or not os.path.isdir(base):
            continue
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.*[0-9]")))
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libnvrtc.so.*[0-9]")))
    for home in settings.cuda_homes:
        found += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    found += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"), reverse=True)
    found.append("libnvrtc.so")
    return [f for f in found if "builtins" not in Path(f).name and "alt" not in Path(f).name]


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    raise RuntimeError(
        "libnvrtc not found; install nvidia-cuda-nvrtc-cu12 or set PHOBOS_NVRTC\n" + "\n".join(errors)
    )


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _check(status: int, what: str) -> None:
    if status != 0:
        msg = _library().nvrtcGetErrorString(status).decode()
        raise RuntimeError(f"{what} failed: {msg}")


_cache: dict[tuple[str, tuple[str, ...]], str] = {}
_cache_lock = threading.Lock()


def compile_to_ptx(
    source: str, arch: str = "compute_90", options: tuple[str, ...] = DEFAULT_OPTIONS, name: str = "phobos.cu"
) -> str:
    """Compile CUDA C++ to PTX; raises NvrtcError with NVRTC's log when it refuses the source."""
    opts = (f"-arch={arch}", *options)
    key = (source, opts)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    disk_name = _disk_name(source, opts)
    text = read_entry(disk_name)
    if text is None:
        text = _compile(source, opts, name)
        cache.write_text(disk_name, entry_text(text))
    with _cache_lock:
        _cache[key] = text
    return text


def _disk_name(source: str, opts: tuple[str, ...]) -> str:
    # The format is part of the key: files of an older format are other names, not corrupted ones.
    digest = hashlib.sha256("\0".join((source, *opts, repr(version()), ENTRY_FORMAT)).encode()).hexdigest()
    return f"ptx/{digest}.ptx"


def entry_text(ptx: str) -> str:
    body = ptx.encode()
    return f"// {ENTRY_FORMAT} sha256={hashlib.sha256(body).hexdigest()} bytes={len(body)}\n{ptx}"


def read_entry(disk_name: str) -> str | None:
    """The PTX of a cache file; None when it is missing, or corrupted (then with a warning)."""
    path = cache.cache_file(disk_name)
    try:
        raw = path.read_bytes()
    except OSError:  # missing (the usual miss) or unreadable: compiled, and written anew if it can be
        return None
    first, _, body = raw.partition(b"\n")
    try:
        first, ptx = first.decode(), body.decode()
    except UnicodeDecodeError:
        first, ptx = "", ""
    why = None
    if not first.startswith(f"// {ENTRY_FORMAT} "):
        why = "no phobos-ptx header line"
    elif first != entry_text(ptx).partition("\n")[0]:
        why = f"its {len(body)} bytes of PTX do not match the header's sha256 and length"
    elif ".entry" not in ptx:
        why = "no kernel entry in its PTX"
    if why:
        _log.warning("compile cache entry is corrupted; compiling it again",
                     file=str(path), why=why)
        return None
    return ptx


def _compile(source: str, opts: tuple[str, ...], name: str) -> str:
    lib = _library()
    prog = ctypes.c_void_p()
    _check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.value.decode(errors="replace")
        if status != 0:
            raise NvrtcError(log, source)
        _check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()
