"""The one cache folder of phobos: $PHOBOS_CACHE_DIR, default ~/.cache/phobos.

What lives there, one JSON file each: the single-GPU tile autotuner's choices
(compiler/cuda/tuning/autotune.py, `autotune.json`) and the cluster calibration with the leaf tuning
(scheduler/tuning/calibrate.py, `cluster-calibration.json`); and one text file per compiled leaf under
`ptx/` (compiler/cuda/nvrtc.py: PTX keyed by a hash of the CUDA source, the NVRTC options and
the NVRTC version, so a leaf is compiled once per machine, not once per job), one JSON file
per set of a job's leaves under `leaf-ptx/` (scheduler/running/leaf_ptx.py: their PTX keyed by what their
CUDA source is made from, so a later job skips generating it), and one file per Python module
under `dataclass-code/<interpreter>/` (common/dataclass_code_cache.py: the code objects of the
methods `dataclasses` generates, so that the programs' start-up does not compile them again).
A cache is only ever a shortcut: a missing, unreadable or malformed file reads as empty, and
writes are atomic so a reader never sees half. A `ptx/` file carries the sha256 of its PTX: one
that does not match is corrupted, compiled again and rewritten with a warning (nvrtc.read_entry).

Cheap to import (json and the atomic writer load when a file is read or written): the command
reaches for the folder before it starts its pods.
"""

from __future__ import annotations

from pathlib import Path

from common import options

ENV = options.CACHE_DIR


def cache_dir() -> Path:
    return options.current().cache_dir or Path.home() / ".cache" / "phobos"


def cache_file(name: str) -> Path:
    return cache_dir() / name


def read_json(name: str) -> dict:
    """The cache file's object, or {} when it is missing or not a JSON object."""
    import json

    try:
        data = json.loads(cache_file(name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_text(name: str) -> str | None:
    """The cache file's text, or None when it is missing or unreadable."""
    try:
        return cache_file(name).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def write_text(name: str, text: str) -> None:
    """Store `text` (atomically); a cache that cannot be written is skipped, never an error."""
    from common.atomic import write_atomically
    from common.errors import UserError

    path = cache_file(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, text)
    except (OSError, UserError):
        pass


def write_json(name: str, data: dict) -> None:
    import json

    from common.atomic import write_atomically

    path = cache_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True))
