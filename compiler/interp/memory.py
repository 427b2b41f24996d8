"""Tile loads and stores for every CTA at once.

A slice of a tensor is, per tensor axis, a *window*: `start :+ extent` (a `SliceIndex` is a
window of extent 1 whose axis is dropped, `:` the window 0 :+ dim). The start is a grid-batched
i32 value (see values.py), so one window describes the slice of every CTA.

Two ways to move the data:

- Strided views (the fast path). When along every tensor axis the start is either the same in all
  CTAs or an arithmetic progression s0 + g * step along one grid axis g (`ctx.block.x * BR`,
  with each grid axis driving at most one tensor axis), the whole grid's slice is a strided
  view of the tensor: axis k of length step * G splits into (G, extent). Loads outside the
  tensor copy the touched box into a buffer pre-filled with the fill value first; stores need
  the box inside the tensor and windows that do not overlap.
- Gather / scatter (the general path): index arrays start + arange(extent), clamped into the
  tensor, with a validity mask selecting the fill value (loads) or dropping the element (stores).

Both paths give the same values; the view path only avoids building index arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from compiler.interp.values import F32, GRID_RANK, I32, with_rank


@dataclass(frozen=True)
class Window:
    """One tensor axis of a slice: `start :+ extent`; `keep=False` for a single index."""

    start: np.ndarray  # grid-batched integer start, shape [gx, gy, gz]
    extent: int
    keep: bool = True


@dataclass(frozen=True)
class _Progression:
    """start = first + g * step along grid axis `axis` (None: the same start in every CTA)."""

    axis: int | None
    first: int
    step: int
    count: int  # CTAs along `axis` (1 when axis is None)


def value_dtype(tensor: np.ndarray) -> np.dtype:
    """What a load of this tensor holds: i32 stays i32, every float storage widens to f32."""
    return I32 if tensor.dtype == I32 else F32


def _progression(start: np.ndarray) -> _Progression | None:
    if start.size == 1:
        return _Progression(None, int(start.reshape(())), 0, 1)
    varying = [g for g in range(GRID_RANK) if start.shape[g] > 1]
    if len(varying) != 1:
        return None
    flat = start.reshape(-1).astype(np.int64)
    step = int(flat[1] - flat[0])
    if step <= 0 or not np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        return None
    return _Progression(varying[0], int(flat[0]), step, flat.size)


def _plan(windows: list[Window]) -> list[_Progression] | None:
    """Progressions for a strided-view access, or None when only gather/scatter will do."""
    plan = []
    used: set[int] = set()
    for w in windows:
        p = _progression(w.start)
        if p is None or (p.axis is not None and p.axis in used):
            return None
        if p.axis is not None:
            used.add(p.axis)
        plan.append(p)
    return plan


def _box(plan: list[_Progression], windows: list[Window]) -> list[tuple[int, int]]:
    """Per tensor axis, the half-open range [lo, hi) of elements the whole grid touches."""
    return [(p.first, p.first + (p.count - 1) * p.step + w.extent)
            for p, w in zip(plan, windows, strict=True)]


def _strided(box_array: np.ndarray, plan: list[_Progression], windows: list[Window],
             writeable: bool) -> np.ndarray:
    """The grid-batched view [gx, gy, gz, tile...] of windows over `box_array` (the touched box)."""
    shape: list[int] = []
    strides: list[int] = []
    grid_pos: dict[int, int] = {}
    tile_pos: list[int] = []
    for p, w, stride in zip(plan, windows, box_array.strides, strict=True):
        if p.axis is not None:
            grid_pos[p.axis] = len(shape)
            shape.append(p.count)
            strides.append(p.step * stride)
        if w.keep:
            tile_pos.append(len(shape))
            shape.append(w.extent)
            strides.append(stride)
    if box_array.dtype.kind in "Vf" and box_array.dtype.itemsize == 1:
        # an fp8 array (ml_dtypes): as_strided cannot rebuild its dtype (e5m2 says '<f1'), so
        # stride its bytes and view them as the format again
        raw = as_strided(box_array.view(np.uint8), shape=shape, strides=strides, writeable=writeable)
        view = raw.view(box_array.dtype)
    else:
        view = as_strided(box_array, shape=shape, strides=strides, writeable=writeable)
    order = [grid_pos[g] for g in sorted(grid_pos)] + tile_pos
    view = view.transpose(order)
    for g in range(GRID_RANK):
        if g not in grid_pos:
            view = np.expand_dims(view, g)  # a view even for writes, unlike a general reshape
    return view


def plan_count(plan: list[_Progression], grid_axis: int) -> int:
    return next((p.count for p in plan if p.axis == grid_axis), 1)


def _index_arrays(windows: list[Window], dims: tuple[int, ...]) -> tuple[list[np.ndarray], np.ndarray]:
    """Clamped index arrays (broadcastable to [grid..., tile...]) and the in-tensor mask."""
    rank = sum(w.keep for w in windows)
    indices, mask = [], None
    tile_axis = 0
    for w, dim in zip(windows, dims, strict=True):
        start = with_rank(w.start.astype(np.int64), rank)
        if w.keep:
            offsets = np.arange(w.extent, dtype=np.int64).reshape(
                (1,) * (GRID_RANK + tile_axis) + (w.extent,) + (1,) * (rank - tile_axis - 1))
            idx = start + offsets
            tile_axis += 1
        else:
            idx = start
        valid = (idx >= 0) & (idx < dim)
        mask = valid if mask is None else mask & valid
        indices.append(np.clip(idx, 0, dim - 1))
    return indices, mask


def load(tensor: np.ndarray, windows: list[Window], fill: np.ndarray, private: bool) -> np.ndarray:
    """The grid-batched tile `tensor[windows]`, elements outside the tensor reading `fill`.

    `private=False` allows returning a read-only view of `tensor` (when no store of the kernel
    can change it); otherwise the result is always a copy.
    """
    dtype = value_dtype(tensor)
    plan = _plan(windows) if fill.size == 1 else None
    if plan is not None:
        box = _box(plan, windows)
        if all(lo >= 0 and hi <= dim for (lo, hi), dim in zip(box, tensor.shape, strict=True)):
            view = _strided(tensor[tuple(slice(lo, hi) for lo, hi in box)], plan, windows, writeable=False)
            return view if view.dtype == dtype and not private else view.astype(dtype)
        if not _sparse(plan, windows, box):
            return _padded(tensor, plan, windows, box, np.full([hi - lo for lo, hi in box],
                                                               fill.reshape(()), dtype=dtype))
    indices, mask = _index_arrays(windows, tensor.shape)
    values = tensor[tuple(indices)].astype(dtype, copy=False)
    fill_value = with_rank(fill, values.ndim - GRID_RANK).astype(dtype)
    return np.where(mask, values, fill_value)


def _padded(tensor: np.ndarray, plan: list[_Progression], windows: list[Window],
            box: list[tuple[int, int]], region: np.ndarray) -> np.ndarray:
    """Windows over `region` (the box, pre-filled with the fill value) after copying in the
    part of the box that lies inside the tensor."""
    src, dst = [], []
    for (lo, hi), dim in zip(box, tensor.shape, strict=True):
        a, b = max(lo, 0), min(hi, dim)
        if a >= b:
            break  # the box misses the tensor: every element reads the fill
        src.append(slice(a, b))
        dst.append(slice(a - lo, b - lo))
    else:
        region[tuple(dst)] = tensor[tuple(src)]
    return _strided(region, plan, windows, writeable=False)


def _sparse(plan: list[_Progression], windows: list[Window], box: list[tuple[int, int]]) -> bool:
    """Windows far apart: a padded copy of their box would dwarf the tiles themselves."""
    box_size = int(np.prod([hi - lo for lo, hi in box], dtype=np.int64))
    tile_size = int(np.prod([p.count * w.extent for p, w in zip(plan, windows, strict=True)], dtype=np.int64))
    return box_size > 4 * tile_size + 4096


def store(tensor: np.ndarray, windows: list[Window], value: np.ndarray, active: np.ndarray | None) -> None:
    """Write the grid-batched `value` into `tensor[windows]` for CTAs where `active` holds.

    Elements outside the tensor are dropped. Values are rounded to the tensor's storage type
    (numpy's and ml_dtypes' casts round to nearest even).
    """
    rank = sum(w.keep for w in windows)
    value = with_rank(value, rank)
    mask = None if active is None else with_rank(active, rank)
    _store(tensor, windows, value, mask)


def store_view(tensor: np.ndarray, windows: list[Window], shape: tuple[int, ...]) -> np.ndarray | None:
    """The writable view of `tensor[windows]` that `store` copies a value of `shape` into when
    every CTA stores (no mask), every window lies inside the tensor and they do not overlap:
    writing the value into it is that store. None when such a store takes another way (a
    scatter, clipped edges) or the shape does not fit."""
    plan = _plan(windows)
    if plan is None:
        return None
    box = _box(plan, windows)
    if not all(lo >= 0 and hi <= dim for (lo, hi), dim in zip(box, tensor.shape, strict=True)):
        return None
    if not _view_store_ok(plan, windows, np.broadcast_to(np.empty((), tensor.dtype), shape), None):
        return None
    view = _strided(tensor[tuple(slice(lo, hi) for lo, hi in box)], plan, windows, writeable=True)
    try:
        fits = np.broadcast_shapes(view.shape, shape) == view.shape
    except ValueError:
        fits = False
    return view if fits else None


# CTAs along a grid axis whose windows stick out of the tensor are stored one at a time (as
# clipped views) when there are at most this many of them; more go through the scatter.
_EDGE_CTAS = 4


def _store(tensor: np.ndarray, windows: list[Window], value: np.ndarray, mask: np.ndarray | None) -> None:
    plan = _plan(windows)
    if plan is None or not _view_store_ok(plan, windows, value, mask):
        _scatter(tensor, windows, value, mask)
        return
    # Split the grid along the first axis whose outermost CTAs reach outside the tensor: the
    # inner CTAs become one view store, the edge CTAs small clipped stores of their own.
    for p, w, dim in zip(plan, windows, tensor.shape, strict=True):
        if p.axis is None:
            continue
        lo = min(max(-(p.first // p.step), 0), p.count)  # first CTA with a start >= 0
        hi = min(max((dim - w.extent - p.first) // p.step + 1, lo), p.count)
        if lo == 0 and hi == p.count:
            continue
        for start, stop, general in _pieces(lo, hi, p.count):
            sub = [_slice_window(x, p.axis, start, stop) for x in windows]
            part_value = _slice_grid(value, p.axis, start, stop)
            part_mask = _slice_grid(mask, p.axis, start, stop)
            (_scatter if general else _store)(tensor, sub, part_value, part_mask)
        return
    _clipped_view_store(tensor, plan, windows, value, mask)


def _pieces(lo: int, hi: int, count: int) -> list[tuple[int, int, bool]]:
    """Ranges of CTAs [start, stop) along one grid axis, and whether each needs the scatter."""
    pieces = [(lo, hi, False)] if hi > lo else []
    for a, b in ((0, lo), (hi, count)):
        if b - a > _EDGE_CTAS:
            pieces.append((a, b, True))
        else:
            pieces.extend((g, g + 1, False) for g in range(a, b))
    return pieces


def _slice_grid(arr: np.ndarray | None, axis: int, start: int, stop: int) -> np.ndarray | None:
    if arr is None or arr.shape[axis] == 1:
        return arr
    index = [slice(None)] * arr.ndim
    index[axis] = slice(start, stop)
    return arr[tuple(index)]


def _slice_window(w: Window, axis: int, start: int, stop: int) -> Window:
    return Window(_slice_grid(w.start, axis, start, stop), w.extent, w.keep)


def _clipped_view_store(tensor: np.ndarray, plan: list[_Progression], windows: list[Window],
                        value: np.ndarray, mask: np.ndarray | None) -> None:
    """Every grid-driven window is inside the tensor; windows with a uniform start may still
    stick out, and are clipped (together with the matching part of the value)."""
    clipped_plan, clipped, value_index = [], [], [slice(None)] * GRID_RANK
    for p, w, dim in zip(plan, windows, tensor.shape, strict=True):
        if p.axis is not None:
            clipped_plan.append(p)
            clipped.append(w)
            if w.keep:
                value_index.append(slice(None))
            continue
        a, b = max(p.first, 0), min(p.first + w.extent, dim)
        if a >= b:
            return  # wholly outside: every element is dropped
        clipped_plan.append(_Progression(None, a, 0, 1))
        clipped.append(Window(w.start, b - a, w.keep))
        if w.keep:
            value_index.append(slice(a - p.first, b - p.first))
    value_index = [ix if value.shape[n] > 1 else slice(None) for n, ix in enumerate(value_index)]
    value = value[tuple(value_index)]
    box = _box(clipped_plan, clipped)
    region = tensor[tuple(slice(lo, hi) for lo, hi in box)]
    view = _strided(region, clipped_plan, clipped, writeable=True)
    np.copyto(view, value, casting="unsafe", where=True if mask is None else mask)


def _scatter(tensor: np.ndarray, windows: list[Window], value: np.ndarray, mask: np.ndarray | None) -> None:
    indices, inside = _index_arrays(windows, tensor.shape)
    if mask is not None:
        inside = inside & mask
    shape = np.broadcast_shapes(value.shape, inside.shape, *(i.shape for i in indices))
    inside = np.broadcast_to(inside, shape)
    picked = tuple(np.broadcast_to(i, shape)[inside] for i in indices)
    tensor[picked] = np.broadcast_to(value, shape)[inside].astype(tensor.dtype)


def _view_store_ok(plan: list[_Progression], windows: list[Window], value: np.ndarray,
                   mask: np.ndarray | None) -> bool:
    """A view store needs disjoint windows and a value that does not vary along a grid axis the
    target does not (several CTAs racing for one element: the scatter picks one)."""
    for p, w in zip(plan, windows, strict=True):
        if p.axis is not None and p.step < w.extent:
            return False
    for g in range(GRID_RANK):
        count = plan_count(plan, g)
        for arr in (value, mask):
            if arr is not None and arr.shape[g] not in (1, count):
                return False
    return True
