"""Binding a checked kernel to concrete sizes: dimension values, tile values and the launch grid.

A kernel's source is symbolic: tensor extents are dimension names (M, N, ...) and tile extents
are @autotune names (TILE_M, ...). Before it can run, every one of those names needs an integer.
`bind` collects them, checks every promise the source makes about them (@aligned, the @autotune
search space, the shapes of the tensors handed in) and computes the grid: ceil(dim / tile) CTAs
per grid axis (one per element for an axis tied by a grid index).
Every mistake is a `UserError` with one line naming the offending value.

Scalar arguments get their values here too (`scalar_value`): the one rule of what an i32
parameter takes, for the interpreter, job files and every launch (compiler/cuda/scalars.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import UserError
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError


class FrozenDict(dict):
    """A dict that cannot change after it is built; hashable and picklable (unlike a
    MappingProxyType), so a Binding can be a cache key or cross a process boundary."""

    def _immutable(self, *args, **kwargs):
        raise TypeError("a Binding's mappings are read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable
    __ior__ = _immutable

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.items())))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


@dataclass(frozen=True)
class Binding:
    """Concrete values for one launch of one kernel.

    `dims`: every dimension value (including ones fixed by a single-value @autotune entry);
    `tile_values`: every @autotune name's value; `env`: dims and tile values together, the
    environment for `Size.evaluate`; `grid`: CTA counts, one per entry of `kernel.grid`.
    """

    dims: Mapping[str, int]
    tile_values: Mapping[str, int]
    env: Mapping[str, int]
    grid: tuple[int, ...]


def kernel_dims(kernel: ir.Kernel) -> tuple[str, ...]:
    """The symbolic dimension names of the kernel's tensor parameters, in order of appearance."""
    names: dict[str, None] = {}
    for t in kernel.tensors:
        for d in t.dims:
            if isinstance(d, str):
                names.setdefault(d, None)
    return tuple(names)


def _search_space(kernel: ir.Kernel) -> dict[str, tuple[int, ...]]:
    at = kernel.autotune
    return {d.name: d.values for d in at.dims} if at else {}


def _fmt_values(values: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


def _bind_tiles(kernel: ir.Kernel, space: dict[str, tuple[int, ...]],
                tile_values: Mapping[str, int] | None) -> dict[str, int]:
    given = dict(tile_values or {})
    for name, value in given.items():
        if name not in space:
            known = ", ".join(space) or "none"
            raise UserError(f"kernel {kernel.name} has no @autotune name {name} (it has: {known})")
        if value not in space[name]:
            raise UserError(f"{name} = {value} is outside its @autotune search space "
                            f"(allowed: {_fmt_values(space[name])})")
    return {name: given.get(name, values[0]) for name, values in space.items()}


def _bind_dims(kernel: ir.Kernel, space: dict[str, tuple[int, ...]], dims: Mapping[str, int],
               tiles: dict[str, int], set_tiles: Mapping[str, int]) -> dict[str, int]:
    names = kernel_dims(kernel)
    for name, value in dims.items():
        if name not in names:
            known = ", ".join(names) or "none"
            raise UserError(f"kernel {kernel.name} has no dimension {name} (it has: {known})")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise UserError(f"dimension {name} = {value!r} must be an integer")
        if value < 1:
            raise UserError(f"dimension {name} = {value} must be at least 1")
    out: dict[str, int] = {}
    for name in names:
        if name in space:
            # A dimension that is also an @autotune name (D in [64]) is fixed by the search
            # space: the kernel is written for exactly those values.
            if name in dims:
                if dims[name] not in space[name]:
                    raise UserError(f"dimension {name} = {dims[name]} conflicts with @autotune "
                                    f"{name} in [{_fmt_values(space[name])}]")
                if name in set_tiles and set_tiles[name] != dims[name]:
                    raise UserError(f"dimension {name} = {dims[name]} conflicts with "
                                    f"{name} = {set_tiles[name]} set as a tile value")
                tiles[name] = int(dims[name])
            out[name] = tiles[name]
        elif name in dims:
            out[name] = int(dims[name])
        else:
            raise missing_dims_error(kernel, [n for n in names if n not in dims and n not in space])
    return out


def missing_dims_error(kernel: ir.Kernel, missing: list[str]) -> UserError:
    """The one wording of a missing dimension, for the compiler and the scheduler alike."""
    flags = " ".join(f"--dim {n}=..." for n in missing)
    return UserError(f"missing dimension {', '.join(missing)} of kernel {kernel.name}: give {flags} "
                     "or an existing tensor file whose shape sets it")


def dims_from_files(kernel: ir.Kernel, dims: Mapping[str, int],
                    files: Mapping[str, tuple[tuple[int, ...], str]],
                    given: str = "--dim {name}={value}") -> dict[str, int]:
    """`dims` completed from the shapes of existing tensor files (tensor -> (shape, the file as
    the user named it)). A given dim that disagrees with a file, or two files that disagree, is an
    error naming both; `given` says how the caller gave a dim (a flag, or the Python API's
    `dims=`); a file of the wrong rank is left to the shape check."""
    out, source = dict(dims), {}
    params = {t.name: t for t in kernel.tensors}
    for name, (shape, label) in files.items():
        param = params.get(name)
        if param is None or len(shape) != len(param.dims):
            continue
        for d, n in zip(param.dims, shape, strict=True):
            if not isinstance(d, str):
                continue
            if d in dims and dims[d] != n:
                asked = given.format(name=d, value=dims[d])
                raise UserError(f"{asked} conflicts with tensor {name}: {label} has shape {list(shape)}, "
                                f"so {d} = {n}")
            if d in source and out[d] != n:
                first, where = source[d]
                raise UserError(f"tensors {first} and {name} disagree on {d}: {where} gives {d} = {out[d]}, "
                                f"{label} gives {d} = {n}")
            out.setdefault(d, int(n))
            source.setdefault(d, (name, label))
    return out


def _check_shapes(kernel: ir.Kernel, env: dict[str, int], shapes: Mapping[str, tuple]) -> None:
    params = {t.name: t for t in kernel.tensors}
    for name, shape in shapes.items():
        if name not in params:
            known = ", ".join(params) or "none"
            raise UserError(f"kernel {kernel.name} has no tensor {name} (it has: {known})")
        expected = tensor_shape(params[name], env)
        if tuple(shape) != expected:
            raise UserError(f"tensor {name}: expected shape {expected}, got {tuple(shape)}")


def tensor_shape(param: ir.TensorParam, env: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape of a tensor parameter under bound dimensions."""
    return tuple(d if isinstance(d, int) else env[d] for d in param.dims)


def _check_aligned(kernel: ir.Kernel, env: dict[str, int]) -> None:
    aligned = kernel.aligned
    if aligned is None:
        return
    for i, (dim, tile) in enumerate(aligned.pairs):
        if dim not in env or tile not in env:
            continue  # the checker reports unknown names; nothing to promise here
        if env[dim] % env[tile] != 0:  # pointing at the promise the sizes break
            span = aligned.pair_spans[i] if i < len(aligned.pair_spans) else aligned.span
            message = f"{dim} = {env[dim]} is not a multiple of {tile} = {env[tile]} (@aligned)"
            raise CompileError(span, message)


def bind(kernel: ir.Kernel, dims: Mapping[str, int], tensor_shapes: Mapping[str, tuple] | None = None,
         tile_values: Mapping[str, int] | None = None) -> Binding:
    """Give every symbolic name of `kernel` a value and compute its grid (see the module doc)."""
    space = _search_space(kernel)
    tiles = _bind_tiles(kernel, space, tile_values)
    dim_values = _bind_dims(kernel, space, dims, tiles, tile_values or {})
    env = {**tiles, **dim_values}
    if tensor_shapes is not None:
        _check_shapes(kernel, env, tensor_shapes)
    _check_aligned(kernel, env)
    grid = [axis.count(env) for axis in kernel.grid]
    return Binding(
        dims=FrozenDict(dim_values),
        tile_values=FrozenDict(tiles),
        env=FrozenDict(env),
        grid=tuple(grid),
    )


I32_RANGE = (-(2**31), 2**31 - 1)
INT_RANGES = {"i32": I32_RANGE, "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1)}


def scalar_value(name: str, value, dtype: str) -> int | float | bool:
    """The value of scalar argument `name` for a parameter of type `dtype`: a float for f32; an
    int for i32, i64 and u32, which take only a whole number in the type's range; a bool for bool,
    which takes True/False (or 0/1). Anything else is refused with one line, never truncated or
    wrapped."""
    if dtype == "f32":
        return float(value)
    if dtype == "bool":
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        raise UserError(f"scalar {name} = {value} must be true or false (it is bool)")
    if isinstance(value, bool) or not isinstance(value, int) and (
            not math.isfinite(value) or int(value) != value):
        raise UserError(f"scalar {name} = {value} must be an integer (it is {dtype})")
    lo, hi = INT_RANGES[dtype]
    if not lo <= int(value) <= hi:
        raise UserError(f"scalar {name} = {int(value)} does not fit in {dtype}")
    return int(value)
