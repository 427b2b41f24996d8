"""Tensor storage: `file://` URIs to `.npy` files, read by region, written through a staging copy.

Decisions (the runtime's storage contract):
- Only `file://` URIs naming absolute paths (`file:///data/a.npy`, `file://localhost/data/a.npy`,
  `file:/data/a.npy`); a relative one (`file:data/a.npy`) is resolved against `base` when the
  caller gives one (the scheduler passes the job file's directory) and refused otherwise.
- Confinement: a path must lie inside one of the operator's storage roots after every symlink is
  resolved; a `..` component is refused outright (even one that would stay inside), and so is any
  other scheme. The pod's default root is its working directory (pod/cli.py --storage-root).
- dtypes (common/dtypes.py): f32, f16, i32, i64, u32, u8, bool as the .npy header says
  (little-endian); bf16 and the
  fp8 formats are written with ml_dtypes' names in the header (`bfloat16`, `float8_e4m3fn`,
  `float8_e5m2`), which numpy reads back once ml_dtypes is imported (`write_npy`). Files numpy
  itself wrote from bf16 arrays say `<V2` (an opaque 2-byte record); such a header is read as bf16
  too (an opaque `<V1` is refused: it could be either fp8 format). ml_dtypes is imported by the
  first such header or dtype asked for, not with this module: a job without these tensors never
  loads it (about 10 ms of each process's start-up, docs/performance.md).
- Tiles keep the storage dtype: `read_region_into` a buffer of that dtype copies the bytes as
  they are (pread); a buffer of another dtype (read_region's f32) gets them converted. Writes of
  values already in the storage dtype store them as they are; other values are converted to it
  rounding to nearest (ties to even), for integer types too; integers convert exactly; values
  outside an integer type's range are refused.
- Outputs are written into a staging copy in the same directory (a hidden name that carries the
  job id), its space reserved up front, its data on a 4096-byte boundary when it is 1 MiB or more
  (the header padded with spaces, as the format allows: direct stores need the alignment); a
  job's outputs are committed together through a commit record (common/commit.py) when it
  succeeds; a failed or killed job leaves the original untouched.
  Loads always read the ORIGINAL file. Only regular files are opened (a FIFO would block).
- No output shares its file with another tensor of the job (check_distinct_files).
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from common import dtypes, fileio
from common.errors import UserError
from common.npy_file import _header_of, _read_header, bf16_dtype, open_regular, read_npy  # noqa: F401 (re-exported)


class _StorageDtypes(Mapping):
    """The numpy dtype of each storage dtype name (common/dtypes.py), in the order errors list
    them. Membership and iteration are by name; an ml_dtypes entry is made when first looked up."""

    _NAMES = dtypes.NAMES
    _PLAIN = {n: d.numpy() for n, d in dtypes.TABLE.items() if d.plain}

    def __getitem__(self, name: str) -> np.dtype:
        return dtypes.TABLE[name].numpy()

    def __contains__(self, name: object) -> bool:
        return name in self._NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(self._NAMES)

    def __len__(self) -> int:
        return len(self._NAMES)


STORAGE_DTYPES: Mapping[str, np.dtype] = _StorageDtypes()
MAX_RANK = 4


def dtype_name(dtype) -> str:
    """f32, f16, bf16 or i32 for a numpy dtype of STORAGE_DTYPES (bf16: ml_dtypes.bfloat16)."""
    dtype = np.dtype(dtype)
    ml = dtypes.ml_name_of(dtype)
    if ml is not None:
        return ml
    for name, known in _StorageDtypes._PLAIN.items():
        if dtype == known:
            return name
    raise UserError(f"dtype {dtype} is not a storage dtype ({', '.join(STORAGE_DTYPES)})")


MIN_RUN_BYTES = 4096  # contiguous runs shorter than this are read and written through a memory map
# Reads of several runs each shorter than this go through a memory map too: one numpy copy, which
# runs without the GIL, beats a pread per run when several storage threads read at once (a
# 4096-row tile of a wider matrix: 4096 preads, each taking and dropping the GIL).
PREAD_RUN_BYTES = 1 << 20
STAGING_MARK = ".phobos-staging-"
_JOB_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


# ---- reading ---------------------------------------------------------------------------------------


def _dtype_name(dtype: np.dtype, path: Path) -> str:
    ml = dtypes.ml_name_of(dtype)
    if ml is not None:
        return ml
    if dtype.kind == "V" and dtype.itemsize == 2 and dtype.names is None:
        return "bf16"
    for name, known in _StorageDtypes._PLAIN.items():
        if dtype == known:
            return name
    if dtype.kind == "V" and dtype.itemsize == 1 and dtype.names is None:
        raise UserError(f"{path}: an opaque 1-byte dtype ({dtype.str}) could be e4m3 or e5m2: write the file "
                        "with phobos (common.storage.write_npy), whose header names the fp8 format")
    known = ", ".join(dtypes.NAMES)
    raise UserError(f"{path}: unsupported dtype {dtype.str} (supported: {known}, little-endian)")


def npy_shape(path: Path) -> tuple[int, ...]:
    """The shape in a .npy header, whatever its dtype."""
    return _header_of(path).shape


def tensor_meta(path: Path) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) from the .npy header, without reading the data."""
    header = _header_of(path)
    shape, name = header.shape, _dtype_name(header.dtype, path)
    if not 1 <= len(shape) <= MAX_RANK:
        raise UserError(f"{path}: rank {len(shape)} is not supported (1 to {MAX_RANK})")
    return shape, name


def check_tensor(path: Path, shape: tuple[int, ...], dtype: str) -> None:
    """A UserError unless the file holds a tensor of exactly this shape and dtype."""
    actual_shape, actual_dtype = tensor_meta(path)
    if tuple(actual_shape) != tuple(shape) or actual_dtype != dtype:
        raise UserError(
            f"{path}: holds {actual_dtype}{list(actual_shape)}, expected {dtype}{list(shape)}")


def _open(path: Path, mode: str) -> np.memmap:
    """A memory map of the whole file with the storage dtype (bf16 viewed as such)."""
    with open_regular(path, writable=mode == "r+") as f:
        header = _read_header(path, f)
        shape = header.shape
        if not 1 <= len(shape) <= MAX_RANK:
            raise UserError(f"{path}: rank {len(shape)} is not supported (1 to {MAX_RANK})")
        _dtype_name(header.dtype, path)
        array = np.memmap(f, dtype=header.dtype, mode=mode, offset=header.offset, shape=shape,
                          order="F" if header.fortran else "C")
    if array.dtype.kind == "V" and dtypes.ml_name_of(array.dtype) is None:
        array = array.view(bf16_dtype())  # a '<V2' header numpy wrote for a bf16 array
    return array


def _slices(region, shape: tuple[int, ...], path: Path) -> tuple[slice, ...]:
    if len(region.start) != len(shape) or len(region.shape) != len(shape):
        raise UserError(f"{path}: region of rank {len(region.shape)} for a tensor of rank {len(shape)}")
    slices = []
    for axis, (start, extent, size) in enumerate(zip(region.start, region.shape, shape, strict=True)):
        if start < 0 or extent < 0 or start + extent > size:
            raise UserError(
                f"{path}: region [{start}, {start + extent}) along axis {axis} is outside 0..{size}")
        slices.append(slice(start, start + extent))
    return tuple(slices)


def read_region(path: Path, region) -> np.ndarray:
    """The region's elements as a fresh C-contiguous f32 array (only the region is read)."""
    out = np.empty(tuple(region.shape), dtype=np.float32)
    read_region_into(path, region, out)  # converts the storage dtype: exact for f16/bf16, RNE for big i32
    return out


def read_region_into(path: Path, region, out: np.ndarray) -> int:
    """Read the region into `out` (C-contiguous, shaped like the region; returns bytes read from
    storage). Stored in `out`'s own dtype and in one run or runs of PREAD_RUN_BYTES or more, the
    bytes go straight from the file into `out` with pread, one call per run (no memory map, no
    temporary); otherwise they are copied (and converted) through a memory map."""
    array = _open(path, "r")
    slices = _slices(region, array.shape, path)
    if tuple(out.shape) != tuple(region.shape):
        raise UserError(f"{path}: a buffer of shape {list(out.shape)} for a region of shape "
                        f"{list(region.shape)}")
    runs = _runs(region, array.shape) if array.flags.c_contiguous else None
    if (array.dtype != out.dtype or not out.flags.c_contiguous or runs is None
            or len(runs) > 1 and runs[0][1] * array.dtype.itemsize < PREAD_RUN_BYTES):
        out[...] = array[slices]
        return int(np.prod(region.shape)) * array.dtype.itemsize
    itemsize, offset = array.dtype.itemsize, array.offset
    del array
    target = memoryview(out.reshape(-1).view(np.uint8))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        done = 0
        for first, count in runs:
            fileio.pread_exactly(fd, target[done:done + count * itemsize], offset + first * itemsize, path)
            done += count * itemsize
    finally:
        os.close(fd)
    return done


def _runs(region, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """(first element, element count) of each contiguous run of a C-order region, in order; None
    when the runs are too short for one system call each to beat a memory map."""
    inner, run = _run_axes(region, shape)
    if run * 4 < MIN_RUN_BYTES and np.prod(region.shape[:inner]) > 1:
        return None  # decided before the offsets are computed: a region of short runs has many
    firsts, run = _run_offsets(region, shape)
    return [(int(first), run) for first in firsts] if run else []


def _run_axes(region, shape: tuple[int, ...]) -> tuple[int, int]:
    """(the axes before the run, the run's length in elements) of a C-order region: the last
    axis and every axis before it that the region spans whole make one contiguous run."""
    inner = len(shape) - 1
    while inner > 0 and region.shape[inner] == shape[inner] and region.start[inner] == 0:
        inner -= 1  # axes the region spans whole join the run
    return inner, int(np.prod(region.shape[inner:]))


def _run_offsets(region, shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """The first element of each contiguous run of a C-order region (in order) and the run's
    length in elements (the same for every run)."""
    inner, run = _run_axes(region, shape)
    outer = region.shape[:inner]
    strides = [int(np.prod(shape[axis + 1:])) for axis in range(len(shape))]
    base = sum(start * stride for start, stride in zip(region.start, strides, strict=True))
    if run == 0 or np.prod(outer) == 0:
        return np.zeros(0, np.int64), 0
    if not outer:
        return np.array([base], np.int64), run
    index = np.indices(outer).reshape(len(outer), -1)
    return base + sum(index[axis] * strides[axis] for axis in range(len(outer))), run


@dataclass(frozen=True)
class Layout:
    """Where a C-order .npy file keeps its elements: the data's byte offset, shape, item size."""

    offset: int
    shape: tuple[int, ...]
    itemsize: int


def layout(path: Path) -> Layout | None:
    """The file's layout from its header; None for a file in Fortran order."""
    header = _header_of(path)
    return None if header.fortran else Layout(header.offset, header.shape, header.dtype.itemsize)


def byte_runs(lay: Layout, region) -> tuple[np.ndarray, int]:
    """The file byte offset of each contiguous run of `region` (in order) and the run's length
    in bytes: which bytes of the file a load of the region reads, or a store writes."""
    firsts, run = _run_offsets(region, lay.shape)
    return lay.offset + firsts.astype(np.int64) * lay.itemsize, run * lay.itemsize


# ---- staging and commit -------------------------------------------------------------------------


def staging_path(final_path: Path, job_id: str) -> Path:
    """Where the job's staging copy of `final_path` lives: same directory, hidden name."""
    if not _JOB_ID.match(job_id):
        raise UserError(f"job id {job_id!r}: use 1 to 64 letters, digits, '_', '-' or '.'")
    final_path = Path(final_path)
    return final_path.with_name(f".{final_path.name}{STAGING_MARK}{job_id}")


def create_staging(final_path: Path, shape: tuple[int, ...], dtype: str, job_id: str,
                   copy_existing: bool = False) -> Path:
    """Create the job's staging copy (zeros, or the final file's contents with `copy_existing`).

    Every byte is reserved on disk (posix_fallocate) before anything is written: pods write the
    copy through memory maps, and a write into a hole of a full filesystem is a SIGBUS, not an
    error. Out of space is one UserError naming the output, with no staging file left behind."""
    if dtype not in STORAGE_DTYPES:
        raise UserError(f"{final_path}: unsupported dtype {dtype!r} (supported: {', '.join(STORAGE_DTYPES)})")
    if not 1 <= len(shape) <= MAX_RANK:
        raise UserError(f"{final_path}: rank {len(shape)} is not supported (1 to {MAX_RANK})")
    staging = staging_path(final_path, job_id)
    header = _header_bytes(tuple(shape), STORAGE_DTYPES[dtype])
    size = len(header) + math.prod(shape) * STORAGE_DTYPES[dtype].itemsize
    try:
        # O_EXCL: never adopt a file (or a FIFO) someone placed at the staging name.
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        raise UserError(f"{final_path}: cannot create its staging copy {staging} ({err.strerror})") from None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as err:
            raise UserError(f"{final_path}: cannot reserve {size} bytes for its staging copy "
                            f"({err.strerror}); the output was not changed") from None
        os.pwrite(fd, header, 0)
        os.close(fd)
        fd = -1
        if copy_existing and Path(final_path).exists():
            check_tensor(Path(final_path), tuple(shape), dtype)
            source = _open(Path(final_path), "r")
            array = _open(staging, "r+")
            array.view(source.dtype)[...] = source
            array.flush()
            del array, source
    except BaseException:
        if fd >= 0:
            os.close(fd)
        abort(staging)
        raise
    return staging


def _header_bytes(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The staging copy's .npy header. For DIRECT_MIN_BYTES of data or more it is padded (with
    spaces, as the format allows) to DIRECT_ALIGN bytes, so that the data starts on a disk block
    and the stores can write it directly (fileio.write_runs)."""
    out = io.BytesIO()
    npy_format.write_array_header_1_0(out, _npy_header(shape, dtype))
    header = out.getvalue()
    if math.prod(shape) * dtype.itemsize < fileio.DIRECT_MIN_BYTES or len(header) >= fileio.DIRECT_ALIGN:
        return header
    text = header[10:].rstrip() + b" " * (fileio.DIRECT_ALIGN - len(header.rstrip()) - 1) + b"\n"
    return header[:8] + len(text).to_bytes(2, "little") + text


def _npy_header(shape: tuple[int, ...], dtype: np.dtype) -> dict:
    # numpy would write bf16 as '<V2', which a plain np.load cannot turn back into bf16.
    ml = dtypes.ml_name_of(dtype)
    descr = dtypes.TABLE[ml].ml_name if ml else npy_format.dtype_to_descr(dtype)
    return {"descr": descr, "fortran_order": False, "shape": tuple(int(n) for n in shape)}


def write_npy(file, array: np.ndarray) -> None:
    """Write `array` to a binary file object as .npy, bf16 with a header numpy reads back."""
    array = np.ascontiguousarray(array)
    npy_format.write_array_header_1_0(file, _npy_header(array.shape, array.dtype))
    file.write(array.tobytes())


def _to_storage(values: np.ndarray, dtype: np.dtype, path: Path) -> np.ndarray:
    return dtypes.to_storage(values, dtype, path)


def write_region(staging: Path, region, values: np.ndarray, writeback: bool = True,
                 direct: bool = False) -> int:
    """Write `values` (shaped like the region, any dtype) into the staging file, converted to its
    storage dtype; returns bytes written. Contiguous runs go in with pwrite and the file is closed
    after the store, so a scheduler on another host sees the bytes after its fsync (NFS flushes
    on close) without an msync per store; short runs go through a memory map, flushed. The
    write-back of pwritten runs is started at once unless `writeback` is False (the caller then
    starts it: a pod waits until neighbouring stores have filled the gaps between the runs,
    pod/storage/disk_order.py). With `direct`, long aligned runs go to the disk past the page cache
    (fileio.write_runs): a CPU pod's stores."""
    array = _open(staging, "r")
    slices = _slices(region, array.shape, staging)
    if tuple(values.shape) != tuple(region.shape):
        raise UserError(f"{staging}: values of shape {list(values.shape)} for a region of shape "
                        f"{list(region.shape)}")
    dtype, offset, shape = array.dtype, array.offset, array.shape
    runs = _runs(region, shape) if array.flags.c_contiguous else None
    del array
    stored = np.ascontiguousarray(_to_storage(values, dtype, staging))
    nbytes = stored.nbytes
    if runs is None:
        array = _open(staging, "r+")
        array[slices] = stored
        array.flush()  # msync, so a scheduler on another host sees the bytes after its fsync
        del array
        return nbytes
    source = memoryview(stored.reshape(-1).view(np.uint8))
    fd = os.open(staging, os.O_WRONLY | os.O_CLOEXEC)
    try:
        pieces = [(offset + first * dtype.itemsize, count * dtype.itemsize) for first, count in runs]
        fileio.write_runs(fd, staging, source, stored.__array_interface__["data"][0], pieces, direct)
        if runs and writeback:
            first_byte = offset + runs[0][0] * dtype.itemsize
            fileio.start_writeback(fd, first_byte, offset + sum(runs[-1]) * dtype.itemsize - first_byte)
    finally:
        os.close(fd)
    return nbytes


def commit(staging: Path, final_path: Path) -> None:
    """Make the staging copy the final file atomically and durably."""
    fileio.fsync_path(staging)
    os.replace(staging, final_path)
    fileio.fsync_path(Path(final_path).parent)


def abort(staging: Path) -> None:
    """Remove a staging copy (a failed job); missing is fine."""
    try:
        os.unlink(staging)
    except FileNotFoundError:
        pass


def find_stale_staging(directory: Path) -> list[Path]:
    """Staging copies left in `directory` by jobs that were killed before commit or abort."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith(".") and STAGING_MARK in p.name)


COPY_PIECE_BYTES = 64 << 20


def row_pieces(shape: tuple[int, ...], itemsize: int, piece_bytes: int) -> list[tuple[int, int]]:
    """(first row, row count) along axis 0 of pieces of at most `piece_bytes` (at least one row
    each) that together cover an array of `shape`; none for an empty array."""
    if not shape or any(n == 0 for n in shape):
        return []
    row_bytes = max(1, math.prod(shape[1:]) * itemsize)
    rows = max(1, piece_bytes // row_bytes)
    return [(first, min(rows, shape[0] - first)) for first in range(0, shape[0], rows)]


def region_rows(region, first: int, count: int):
    """Rows first..first+count (along axis 0, counted within the region) of `region`."""
    return type(region)(region.tensor, (region.start[0] + first, *region.start[1:]),
                        (count, *region.shape[1:]))


def copy_regions(source: Path, staging: Path, regions) -> int:
    """Copy `regions` of the old file `source` into the staging copy, in the storage dtype, in
    pieces of at most COPY_PIECE_BYTES along the first axis; returns bytes copied. The job's
    own stores fill the rest (scheduler/jobs/coverage.py says which regions they leave)."""
    dtype = _open(source, "r").dtype
    copied = 0
    for region in regions:
        for first, count in row_pieces(tuple(region.shape), dtype.itemsize, COPY_PIECE_BYTES):
            piece = region_rows(region, first, count)
            values = np.empty(piece.shape, dtype)
            read_region_into(source, piece, values)
            copied += write_region(staging, piece, values)
    return copied
