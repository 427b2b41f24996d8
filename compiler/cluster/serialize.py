"""The Cap'n Proto form of a cluster program (schemas/cluster.capnp), both ways.

    to_capnp(program) -> builder      a ClusterProgram message (`.to_bytes()` to send it)
    from_capnp(reader) -> ClusterProgram
    to_bytes(program) / from_bytes(data)

Regions repeat a lot (a tensor read whole by every unit, the output region of every step of a
unit); from_capnp interns them so a decoded program shares them as the compiler's does.
"""

from __future__ import annotations

import functools
from pathlib import Path

from common.errors import UserError
from compiler.cluster.units import no_gc_pauses
from schemas.program import ClusterProgram, Launch, Leaf, Region, TensorInfo, Unit

FORMAT = 1
# A program of 100,000 units is tens of MiB; reading one must not trip the 64 MiB default.
TRAVERSAL_LIMIT_WORDS = 1 << 30


def _schema_path() -> Path:
    try:
        from common.paths import repo_file
    except ImportError:  # pragma: no cover - before common/paths.py existed
        return Path(__file__).resolve().parents[2] / "schemas" / "cluster.capnp"
    return repo_file("schemas/cluster.capnp")


@functools.cache
def schema():
    import capnp

    return capnp.load(str(_schema_path()))


def _named(builder, field: str, pairs) -> None:
    items = builder.init(field, len(pairs))
    for item, (name, value) in zip(items, pairs, strict=True):
        item.name = name
        item.value = value


def _ints(builder, field: str, values) -> None:
    items = builder.init(field, len(values))
    for i, v in enumerate(values):
        items[i] = v


def _texts(builder, field: str, values) -> None:
    items = builder.init(field, len(values))
    for i, v in enumerate(values):
        items[i] = v


def _bindings(builder, field: str, pairs) -> None:
    items = builder.init(field, len(pairs))
    for item, (param, region) in zip(items, pairs, strict=True):
        item.param = param
        r = item.init("region")
        r.tensor = region.tensor
        r.start = list(region.start)
        r.shape = list(region.shape)


def to_capnp(program: ClusterProgram):
    msg = schema().ClusterProgram.new_message()
    msg.format = FORMAT
    msg.kernel = program.kernel
    msg.source = program.source
    _named(msg, "dims", program.dims)
    _named(msg, "clusterValues", program.cluster_values)
    _named(msg, "tileValues", program.tile_values)
    _ints(msg, "superGrid", program.super_grid)
    for item, t in zip(msg.init("tensors", len(program.tensors)), program.tensors, strict=True):
        item.name, item.dtype, item.role = t.name, t.dtype, t.role
        _ints(item, "shape", t.shape)
    _texts(msg, "scalars", program.scalars)
    for item, leaf in zip(msg.init("leaves", len(program.leaves)), program.leaves, strict=True):
        item.name, item.kernel, item.source = leaf.name, leaf.kernel, leaf.source
        _named(item, "dims", leaf.dims)
        _named(item, "tileValues", leaf.tile_values)
        _ints(item, "grid", leaf.grid)
        item.threads = leaf.threads
        _texts(item, "tensors", leaf.tensors)
        _texts(item, "scalars", leaf.scalars)
        item.flops = leaf.flops
    for item, unit in zip(msg.init("units", len(program.units)), program.units, strict=True):
        item.coord = list(unit.coord)
        item.index = unit.index
        for li, launch in zip(item.init("launches", len(unit.launches)), unit.launches, strict=True):
            li.leaf = launch.leaf
            _bindings(li, "reads", launch.reads)
            _bindings(li, "writes", launch.writes)
    return msg


def _pairs(items) -> tuple[tuple[str, int], ...]:
    return tuple((i.name, i.value) for i in items)


def from_capnp(reader) -> ClusterProgram:
    if reader.format != FORMAT:
        raise UserError(
            f"cluster program format {reader.format} is not supported (this build reads {FORMAT})"
        )
    interned: dict[tuple, Region] = {}

    def region(r) -> Region:
        key = (r.tensor, tuple(r.start), tuple(r.shape))
        found = interned.get(key)
        if found is None:
            found = interned[key] = Region(*key)
        return found

    def bindings(items) -> tuple[tuple[str, Region], ...]:
        return tuple((b.param, region(b.region)) for b in items)

    leaves = tuple(
        Leaf(
            name=x.name,
            kernel=x.kernel,
            source=x.source,
            dims=_pairs(x.dims),
            tile_values=_pairs(x.tileValues),
            grid=tuple(x.grid),
            threads=x.threads,
            tensors=tuple(x.tensors),
            scalars=tuple(x.scalars),
            flops=x.flops,
        )
        for x in reader.leaves
    )
    units = tuple(
        Unit(
            coord=tuple(u.coord),
            index=u.index,
            launches=tuple(
                Launch(launch.leaf, bindings(launch.reads), bindings(launch.writes)) for launch in u.launches
            ),
        )
        for u in reader.units
    )
    return ClusterProgram(
        kernel=reader.kernel,
        source=reader.source,
        dims=_pairs(reader.dims),
        cluster_values=_pairs(reader.clusterValues),
        tile_values=_pairs(reader.tileValues),
        super_grid=tuple(reader.superGrid),
        tensors=tuple(TensorInfo(t.name, t.dtype, tuple(t.shape), str(t.role)) for t in reader.tensors),
        scalars=tuple(reader.scalars),
        leaves=leaves,
        units=units,
    )


def to_bytes(program: ClusterProgram) -> bytes:
    with no_gc_pauses():
        return to_capnp(program).to_bytes()


def from_bytes(data: bytes) -> ClusterProgram:
    with (
        no_gc_pauses(),
        schema().ClusterProgram.from_bytes(data, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS) as reader,
    ):
        return from_capnp(reader)
