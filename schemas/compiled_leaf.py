"""A compiled leaf: what the scheduler compiles once, ships in a job's program and a GPU pod
launches as it is, with no parse, no CUDA generation and no NVRTC on the pod (docs/runtime.md).

One leaf runs as a launch sequence: one or more kernels, entries of the one module `code`,
launched in order on one stream, with scratch buffers that live only for the sequence (a split
loop's partials). Every argument a kernel takes is named: a tensor parameter of the leaf, a
scalar parameter, or a scratch buffer. Mirrored by program.capnp's CompiledLeaf; the
conversion is schemas/capnp_io.py's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TensorParam:
    """A tensor parameter of the leaf as its buffer is bound: storage dtype and bound shape."""

    name: str
    dtype: str  # f32, f16, bf16, i32
    shape: tuple[int, ...]


@dataclass(frozen=True)
class TensorMap:
    """A bulk tensor copy's map of a parameter (compiler/cuda/mainloops/tma_ws/maps.py MapSpec's fields)."""

    param: str
    tensor: str
    box_rows: int
    box_cols: int
    rows: int
    cols: int
    dtype: str
    outer: tuple[int, ...] = ()


@dataclass(frozen=True)
class Scratch:
    """A device buffer a launch sequence needs and storage never sees."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    zeroed: bool = True  # cleared before the sequence's first kernel


@dataclass(frozen=True)
class KernelLaunch:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory
    params: tuple[str, ...]  # argument names in launch order: tensors, scalars, scratch
    tensor_maps: tuple[TensorMap, ...] = ()


@dataclass(frozen=True)
class CompiledLeaf:
    leaf: str  # the leaf's name in its program
    source_hash: str  # leaf_hash of the leaf it was compiled from: a pod checks it
    cc: int  # the compute capability it was compiled for
    code_kind: Literal["ptx", "cubin"]
    code: bytes
    kernels: tuple[KernelLaunch, ...]
    tensors: tuple[TensorParam, ...]  # the leaf's tensor parameters, in declaration order
    scalars: tuple[tuple[str, str], ...]  # (name, dtype), in declaration order
    writes: tuple[str, ...]  # tensor parameters the leaf stores to
    tuned: tuple[tuple[str, int], ...] = ()  # the tuned point: the leaf's @autotune values
    schedule: str = ""  # the CUDA schedule it was generated with (Schedule.key())
    scratch: tuple[Scratch, ...] = ()
    needs: tuple[str, ...] = ()  # what the code asks of the GPU (compiler/cuda/target.py FEATURES)

    def tensor(self, name: str) -> TensorParam:
        for param in self.tensors:
            if param.name == name:
                return param
        raise KeyError(name)


def leaf_hash(leaf) -> str:
    """What a compiled leaf was made from, as a hash: the leaf's whole description (source,
    kernel, dims, tile values, grid, ...), so a leaf compiled for other dims never matches."""
    return hashlib.sha256(repr(leaf).encode()).hexdigest()
