"""Writing a whole file so that no reader, and no crash, ever sees half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from common.errors import UserError


def write_atomically(path: str | os.PathLike, data: bytes | str, *, label: str | None = None,
                     durable: bool = False, mode: int = 0o666) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    Readers see the old file or the new one. The file gets the mode a plain open() would give
    (0666 less the umask; mkstemp's 0600 would make a shared output private), or `mode` less
    the umask. `durable` fsyncs
    before the rename (a job file must survive a power cut once written). A missing folder is
    the user's error, named by `label` (a flag and its value, say) or else by the path."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(f"{label or f'cannot write {path}'}: folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, mode & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
