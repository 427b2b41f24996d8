"""Writing a whole file so that no reader, and no crash, ever sees half of it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from common.errors import UserError


def write_atomically(path: str | os.PathLike, data: bytes | str, *, label: str | None = None,
                     durable: bool = False, mode: int = 0o666) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    Readers see the old file or the new one. The file gets the mode a plain open() would give
    (0666 less the umask; mkstemp's 0600 would make a shared output private), or `mode` less
    the umask: the kernel takes the umask off as it creates the temporary file, which is never
    read by setting it (the umask is the process's, and writers run beside other threads that
    create files, and beside forks: common/dataclass_code_cache.py). `durable` fsyncs
    before the rename (a job file must survive a power cut once written). A missing folder is
    the user's error, named by `label` (a flag and its value, say) or else by the path."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{label or f'cannot write {path}'}: folder {path.parent} does not exist")
    refuse_read_only(path, label or f"cannot write {path}")
    fd, tmp = _create_temporary(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _create_temporary(path: Path, mode: int) -> tuple[int, Path]:
    """A new file beside `path`, named .<name>.<random>.tmp (the dataclass code cache removes
    such names left by a writer killed mid-write), created with `mode` less the umask."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name beside {path}")


def refuse_read_only(path: str | os.PathLike, label: str) -> None:
    """A UserError when `path` is an existing file the user made read-only: renaming a new file
    over it would succeed (the folder's permission is what a rename needs), silently replacing
    what they protected. Read-only means no write permission for this process, or none for
    anybody (root passes every access check, but a file of mode 0444 is still meant to stay).
    Commands call it for every output before they write any, so a refusal leaves nothing written."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode) and (not mode & 0o222 or not os.access(path, os.W_OK)):
        raise UserError(f"{label}: {path} is read-only; it is not overwritten "
                        "(make it writable, or write the output elsewhere)")
