"""Storage URIs: the one parser, the absolute form the pods get, a path's URI.

Accepted: `file:///abs/a.npy`, `file://localhost/abs/a.npy`, and a relative `file:data/a.npy`,
taken from a base folder (the job file's, so a job and its data move together). Callers add
their own rule on top of the parse, never a second parser: a job's tensors must be `.npy` files
(scheduler/jobfile.py), and a pod confines every path to its storage roots (common/storage.py).
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
