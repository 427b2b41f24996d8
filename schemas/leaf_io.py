"""The converter of a compiled leaf (schemas/compiled_leaf.py) to and from program.capnp's
CompiledLeaf; capnp_io.py's program messages carry it, the scheduler's leaf cache stores it."""

from __future__ import annotations

from schemas.compiled_leaf import CompiledLeaf, KernelLaunch, Scratch, TensorMap, TensorParam


def write_compiled_leaf(builder, leaf: CompiledLeaf) -> None:
    builder.leaf = leaf.leaf
    builder.sourceHash = leaf.source_hash
    builder.cc = leaf.cc
    builder.codeKind = leaf.code_kind
    builder.code = leaf.code
    for entry, kernel in zip(builder.init("kernels", len(leaf.kernels)), leaf.kernels, strict=True):
        _write_kernel(entry, kernel)
    for entry, param in zip(builder.init("tensors", len(leaf.tensors)), leaf.tensors, strict=True):
        entry.name, entry.dtype, entry.shape = param.name, param.dtype, list(param.shape)
    for entry, (name, dtype) in zip(builder.init("scalars", len(leaf.scalars)), leaf.scalars, strict=True):
        entry.name, entry.dtype = name, dtype
    builder.writes = list(leaf.writes)
    for entry, (name, value) in zip(builder.init("tuned", len(leaf.tuned)), leaf.tuned, strict=True):
        entry.name, entry.value = name, int(value)
    builder.schedule = leaf.schedule
    for entry, buf in zip(builder.init("scratch", len(leaf.scratch)), leaf.scratch, strict=True):
        entry.name, entry.dtype, entry.shape, entry.zeroed = buf.name, buf.dtype, list(buf.shape), buf.zeroed
    builder.needs = list(leaf.needs)


def _write_kernel(builder, kernel: KernelLaunch) -> None:
    builder.entry = kernel.entry
    builder.grid = list(kernel.grid)
    builder.block = list(kernel.block)
    builder.sharedBytes = kernel.shared_bytes
    builder.params = list(kernel.params)
    maps = builder.init("tensorMaps", len(kernel.tensor_maps))
    for entry, spec in zip(maps, kernel.tensor_maps, strict=True):
        entry.param, entry.tensor, entry.dtype = spec.param, spec.tensor, spec.dtype
        entry.boxRows, entry.boxCols = spec.box_rows, spec.box_cols
        entry.rows, entry.cols = spec.rows, spec.cols
        entry.outer = list(spec.outer)


def read_compiled_leaf(reader) -> CompiledLeaf:
    return CompiledLeaf(
        leaf=reader.leaf,
        source_hash=reader.sourceHash,
        cc=reader.cc,
        code_kind=reader.codeKind,
        code=bytes(reader.code),
        kernels=tuple(_read_kernel(k) for k in reader.kernels),
        tensors=tuple(TensorParam(t.name, t.dtype, tuple(t.shape)) for t in reader.tensors),
        scalars=tuple((s.name, s.dtype) for s in reader.scalars),
        writes=tuple(reader.writes),
        tuned=tuple((v.name, v.value) for v in reader.tuned),
        schedule=reader.schedule,
        scratch=tuple(Scratch(s.name, s.dtype, tuple(s.shape), s.zeroed) for s in reader.scratch),
        needs=tuple(reader.needs),
    )


def _read_kernel(reader) -> KernelLaunch:
    maps = tuple(TensorMap(m.param, m.tensor, m.boxRows, m.boxCols, m.rows, m.cols, m.dtype, tuple(m.outer))
                 for m in reader.tensorMaps)
    return KernelLaunch(entry=reader.entry, grid=tuple(reader.grid), block=tuple(reader.block),
                        shared_bytes=reader.sharedBytes, params=tuple(reader.params), tensor_maps=maps)


def compiled_leaf_bytes(leaf: CompiledLeaf) -> bytes:
    """The leaf as one Cap'n Proto message (the scheduler's disk cache keeps these)."""
    from schemas.capnp_io import schema

    builder = schema("program.capnp").CompiledLeaf.new_message()
    write_compiled_leaf(builder, leaf)
    return builder.to_bytes()


def compiled_leaf_of_bytes(data: bytes) -> CompiledLeaf:
    from schemas.capnp_io import read_message, schema

    with read_message(schema("program.capnp").CompiledLeaf, data) as reader:
        return read_compiled_leaf(reader)
