"""Storage URIs: the one parser, the absolute form the pods get, a path's URI, and confinement.

Accepted: `file:///abs/a.npy`, `file://localhost/abs/a.npy`, and a relative `file:data/a.npy`,
taken from a base folder (the job file's, so a job and its data move together). Callers add
their own rule on top of the parse, never a second parser: a job's tensors must be `.npy` files
(scheduler/jobs/jobfile.py); `confine` keeps a path inside the storage roots (the scheduler and every
pod confine each URI before anything is read or written).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError


@dataclass(frozen=True)
class FileUri:
    path: str  # percent-decoded
    relative: bool


def parse_uri(uri: str) -> FileUri:
    """The path a storage URI names, or a UserError naming what is wrong with it."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "file":
        scheme = parts.scheme or "no scheme"
        raise UserError(f"storage URI {uri!r}: only file: URIs are supported (got {scheme})")
    if parts.query or parts.fragment:
        raise UserError(f"storage URI {uri!r}: a query or fragment is not allowed")
    if parts.netloc not in ("", "localhost"):
        raise UserError(f"storage URI {uri!r}: remote host {parts.netloc!r} is not supported")
    path = urllib.parse.unquote(parts.path)
    if not path or path.endswith("/"):
        raise UserError(f"storage URI {uri!r}: names no file")
    if "\x00" in path:
        raise UserError(f"storage URI {uri!r}: contains a NUL character")
    relative = not path.startswith("/")
    if relative and parts.netloc:
        raise UserError(f"storage URI {uri!r}: a relative path cannot have a host")
    return FileUri(path=path, relative=relative)


def absolute_uri(uri: str, base_dir: Path) -> str:
    """The absolute `file:///...` form of `uri`, a relative path taken from `base_dir`."""
    parsed = parse_uri(uri)
    path = Path(parsed.path)
    if parsed.relative:
        path = base_dir / path
    return path_to_uri(Path(os.path.abspath(path)))


def path_to_uri(path: Path) -> str:
    """The URI of an absolute path (not resolved through symlinks: the caller decides that)."""
    return "file://" + urllib.parse.quote(str(path))


def confine(uri: str, roots: list[Path] | tuple[Path, ...], base: Path | None = None) -> Path:
    """The confined absolute path a `file://` URI names, or a UserError saying why not.

    Nothing is read or written here; the file need not exist (an output may be created later),
    but every existing part of its path is resolved through symlinks before the root check."""
    raw = parse_uri(uri).path
    if ".." in Path(raw).parts:
        raise UserError(f"storage URI {uri!r}: '..' is not allowed in a storage path")
    path = Path(raw)
    if not path.is_absolute():
        if base is None:
            raise UserError(f"storage URI {uri!r}: relative path with nothing to resolve it against")
        path = Path(base) / path
    real = Path(os.path.realpath(path))
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if real == real_root or real.is_relative_to(real_root):
            return real
    allowed = ", ".join(str(r) for r in roots) or "(none)"
    raise UserError(f"storage URI {uri!r}: {real} is outside the storage roots ({allowed})")


def _file_identity(path: Path) -> tuple:
    """What makes two paths one file: the inode of an existing file (so hard links and symlinks
    are caught), else the fully resolved path."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return ("path", real)
    return ("inode", st.st_dev, st.st_ino)


def check_distinct_files(tensors: list[tuple[str, Path, bool]]) -> None:
    """Refuse a job in which a written tensor shares its file with another tensor.

    `tensors` holds (name, path, written). Two outputs in one file would share one staging copy
    (a mix of both is committed), and an output that is also another parameter's input would
    change a file the job promises only to read. Inputs may share a file with each other."""
    groups: dict[tuple, list[tuple[str, Path, bool]]] = {}
    for item in tensors:
        groups.setdefault(_file_identity(item[1]), []).append(item)
    for group in groups.values():
        writers = [name for name, _, written in group if written]
        if not writers or len(group) < 2:
            continue
        real = os.path.realpath(group[0][1])
        if len(writers) > 1:
            raise UserError(f"tensors {writers[0]} and {writers[1]} are both outputs and name one file "
                            f"({real}): give each output a file of its own")
        reader = next(name for name, _, written in group if not written)
        raise UserError(f"tensor {writers[0]} is an output and tensor {reader} an input, and both name "
                        f"{real}: inputs are only read, so write {writers[0]} to another file")


def resolved_uri(path: Path) -> str:
    """The URI of `path` resolved through symlinks (the file the pods will open)."""
    return path_to_uri(Path(path).resolve())
