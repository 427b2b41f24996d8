"""A job's GPU leaves compiled once here for every kind of GPU among the pods (CompiledLeaf,
schemas/compiled_leaf.py: PTX with its launch sequence and parameter layout, which the pods launch
as they are), and kept on disk by the leaves' description so that a later job with the same leaves
skips the CUDA code generator.

Each GPU pod says its compute capability in its hello (PodInfo.compute_capability); the leaves
are compiled once per capability among the job's pods (`ptx_for_pods`: an A100 pod and an H200
pod get PTX for compute_80 and compute_90), and a pod that cannot run a leaf (a tensor-core dot
on a GPU older than 8.0) fails the job before anything is sent, with the error at the leaf's dot
and a note naming the pod. A pod too old to say its capability gets the H200's, as before.

NVRTC's own cache (compiler/cuda/nvrtc.py) is keyed by the generated CUDA source, so a job that
hits it still imports the generator and generates every leaf's source (about 0.1 s of the
command's start-up on the H200). This cache sits in front of it, keyed by what the source is made
from: each leaf as the cluster program describes it (kernel text, dims, tile values, grid, ...),
the compiler's own Python files (any change to the generator is a new key), the environment
switches that shape the code, and the NVRTC library the compile would load (its path, size and
time). A hit hands the compiled leaves over without importing compiler.cuda's generator; anything
missing, unreadable or malformed is a miss, compiled and stored again (common/cache.py). Stored as
JSON: leaf name -> the CompiledLeaf's Cap'n Proto message in base64.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import threading
from pathlib import Path

from common import cache, options
from compiler.cuda.target import DEFAULT_CC, cc_text
from compiler.frontend.diagnostics import CompileError
from schemas.compiled_leaf import CompiledLeaf

COMPILER = Path(__file__).resolve().parents[2] / "compiler"
CODE_SWITCHES = options.CODE_SWITCHES
DUMPS = options.DUMPS  # asked for the compiler's stages: compile


def leaves_for_pods(program, pods: dict[int, tuple[int, str]]) -> dict[int, dict[str, CompiledLeaf]]:
    """Every leaf compiled for each GPU pod: `pods` maps a node to (its GPU's compute capability,
    0 where the pod did not say; how errors name it), the result a node to its compiled leaves.
    Pods of one capability share one compile (and one disk cache entry)."""
    by_cc: dict[int, list[int]] = {}
    for node, (cc, _) in sorted(pods.items()):
        by_cc.setdefault(cc or DEFAULT_CC, []).append(node)
    out = {}
    for cc, nodes in sorted(by_cc.items()):
        try:
            compiled = compiled_leaves(program, cc)
        except CompileError as err:
            names = "; ".join(pods[n][1] for n in nodes)
            note = f"compiling the job's leaves for the GPU of compute capability {cc_text(cc)} of {names}"
            raise CompileError(err.span, err.message, "\n".join(filter(None, [err.note, note]))) from None
        out.update(dict.fromkeys(nodes, compiled))
    return out


def compiled_leaves(program, cc: int = DEFAULT_CC) -> dict[str, CompiledLeaf]:
    """Every leaf (by leaf name) compiled for a GPU of compute capability `cc`, bound exactly as
    the pods would bind it."""
    key = _key(program.leaves, cc)
    name = f"leaf-ptx/{key}.json" if key else None
    if name is not None:
        cached = _stored(cache.read_json(name))
        if cached is not None and set(cached) == {leaf.name for leaf in program.leaves}:
            return cached
    compiled = compile_leaves(program, cc)
    if name is not None:
        from schemas.leaf_io import compiled_leaf_bytes

        cache.write_text(name, json.dumps({leaf: base64.b64encode(compiled_leaf_bytes(c)).decode()
                                           for leaf, c in compiled.items()}))
    return compiled


def _stored(entries: dict) -> dict[str, CompiledLeaf] | None:
    """The cache file's compiled leaves, or None where any is malformed."""
    import capnp

    from schemas.leaf_io import compiled_leaf_of_bytes

    out = {}
    try:
        for name, text in entries.items():
            out[name] = compiled_leaf_of_bytes(base64.b64decode(text, validate=True))
    except (TypeError, ValueError, binascii.Error, capnp.KjException):
        return None
    ok = all(c.leaf == name and c.kernels and b".entry" in c.code for name, c in out.items())
    return out if ok else None


def compile_leaves(program, cc: int = DEFAULT_CC) -> dict[str, CompiledLeaf]:
    from compiler.cuda.mainloops.split_loop.launch import compile_leaf

    return {leaf.name: compile_leaf(leaf, cc) for leaf in program.leaves}


def _key(leaves, cc: int) -> str | None:
    """The cache key; None (compile) where the NVRTC library to be loaded is not a file found
    here, or where the user asked for the compiler's stages to be dumped."""
    library = None if any(options.variable(v) for v in DUMPS) else _nvrtc_library()
    if library is None:
        return None
    digest = hashlib.sha256()
    for part in (_compiler_digest(), library, f"sm_{cc}",
                 *(f"{v}={options.variable(v) or ''}" for v in CODE_SWITCHES),
                 *(repr(leaf) for leaf in leaves)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def warm_up() -> None:
    """Start hashing the compiler's files in a thread: a job for GPU pods needs the hash for its
    leaves' cache key, and reaching the pods hides it (about 5 ms of the job's own time on the
    H200 machine otherwise). A job that asks before the thread is done waits for it."""
    threading.Thread(target=_compiler_digest, name="leaf-ptx-key", daemon=True).start()


_DIGEST: list[str] = []  # the hash, once made
_DIGEST_LOCK = threading.Lock()  # made once: an asker waits for the one making it


def _compiler_digest() -> str:
    """A hash of every Python file of the compiler (the front end, the cluster compiler, the
    CUDA generator): the generated source can depend on any of them."""
    with _DIGEST_LOCK:
        if not _DIGEST:
            digest = hashlib.sha256()
            for path in sorted(COMPILER.rglob("*.py")):
                digest.update(str(path.relative_to(COMPILER)).encode() + b"\0" + path.read_bytes() + b"\0")
            _DIGEST.append(digest.hexdigest())
        return _DIGEST[0]


def _nvrtc_library() -> str | None:
    """Path, size and modification time of the first NVRTC library file the compiler would try."""
    from compiler.cuda import nvrtc  # the candidates only: no library is loaded

    for candidate in nvrtc._candidates():  # noqa: SLF001 (the compiler's own search order)
        try:
            stat = os.stat(candidate)
        except OSError:
            continue
        return f"{os.path.realpath(candidate)}:{stat.st_size}:{stat.st_mtime_ns}"
    return None
