"""Opening .npy files and reading their headers, checked, and whole files (`read_npy`): the
reading half of tensor storage (common/storage.py re-exports every name; its docstring holds the
storage contract). A file that does not start with the .npy magic is named as no .npy file before
numpy could take it for something else; a header is checked against the file's size; only
regular files are opened (a FIFO would block)."""

from __future__ import annotations

import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from common import dtypes
from common.errors import UserError


def bf16_dtype() -> np.dtype:
    """ml_dtypes.bfloat16, imported here on first use (numpy has no bf16 of its own)."""
    return dtypes.TABLE["bf16"].numpy()


def open_regular(path: Path, writable: bool = False):
    """The file opened as a binary file object, or a UserError: a FIFO or a device is refused
    without blocking (O_NONBLOCK), so a FIFO planted in a storage root cannot hang a reader."""
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a .npy file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as err:
        raise UserError(f"{path}: cannot open ({err.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UserError(f"{path}: not a regular file ({_file_kind(mode)}); a tensor must be a .npy file")
    return os.fdopen(fd, "r+b" if writable else "rb")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


@dataclass(frozen=True)
class _Header:
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int  # where the data starts


def _read_header(path: Path, f) -> _Header:
    """The .npy header of the open file `f`, checked against the file's size (a truncated file
    is refused here, naming it, instead of failing later inside a memory map)."""
    start = f.tell()
    _check_magic(path, f)
    try:
        shape, fortran, dtype = _parse_header(path, f)
    except ValueError as err:
        if "ml_dtypes" in sys.modules:
            raise UserError(f"{path}: not a valid .npy file ({err})") from None
        bf16_dtype()  # the header may name `bfloat16`, which numpy knows once ml_dtypes is loaded
        f.seek(start)
        return _read_header(path, f)  # once more, now with ml_dtypes
    header = _Header(tuple(shape), fortran, dtype, f.tell())
    expected = math.prod(header.shape) * dtype.itemsize
    held = os.fstat(f.fileno()).st_size - header.offset
    if held < expected:
        raise UserError(f"{path}: truncated .npy file: its header promises {expected} bytes of data, "
                        f"the file holds {max(held, 0)}")
    return header


def _check_magic(path: Path, f) -> None:
    """A file that does not start as .npy files do is said to be no .npy file, before numpy can
    read it as something else (np.load takes it for a pickle and talks of allow_pickle)."""
    start = f.tell()
    magic = f.read(len(npy_format.MAGIC_PREFIX))
    f.seek(start)
    if magic != npy_format.MAGIC_PREFIX:
        found = f"it starts with {magic!r}" if magic else "the file is empty"
        raise UserError(f"{path}: not a .npy file (bad magic: {found}; a .npy file starts with "
                        f"{npy_format.MAGIC_PREFIX!r})")


def read_npy(path: Path, writable: bool = False) -> np.ndarray:
    """A whole .npy file, of any dtype (a `<V2` header read as bf16): a read-only memory map, or
    with `writable` an array of its own. The one whole-file reader (the compiler's `run`, the
    scheduler's --expect): a file that is not .npy, truncated or of objects is a UserError naming
    it; numpy's pickle reader is never reached."""
    with open_regular(path) as f:
        header = _read_header(path, f)
        if header.dtype.hasobject:
            raise UserError(f"{path}: holds Python objects; a tensor is a .npy file of numbers")
        order = "F" if header.fortran else "C"
        if writable or math.prod(header.shape) == 0:  # numpy cannot map an empty region
            count = math.prod(header.shape)
            array = np.fromfile(f, dtype=header.dtype, count=count).reshape(header.shape, order=order)
        else:
            array = np.memmap(f, dtype=header.dtype, mode="r", offset=header.offset, shape=header.shape,
                              order=order)
    if (array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None
            and dtypes.ml_name_of(array.dtype) is None):
        array = array.view(bf16_dtype())  # a '<V2' header numpy wrote for a bf16 array
    return array


def _parse_header(path: Path, f) -> tuple:
    version = npy_format.read_magic(f)
    if version == (1, 0):
        return npy_format.read_array_header_1_0(f)
    if version in ((2, 0), (3, 0)):
        return npy_format.read_array_header_2_0(f)
    raise UserError(f"{path}: unsupported .npy version {version}")


def _header_of(path: Path) -> _Header:
    with open_regular(path) as f:
        return _read_header(path, f)
