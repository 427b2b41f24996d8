"""Finding and loading the Cap'n Proto schemas the scheduler reads and writes (job.capnp)."""

from __future__ import annotations

import functools
from pathlib import Path


def schema_path(name: str) -> Path:
    """The path of `schemas/<name>`, in the checkout or under Bazel runfiles."""
    try:
        from common.paths import repo_file  # written by the foundation engineer
    except ImportError:  # pragma: no cover - only before common/paths.py exists
        return Path(__file__).resolve().parents[1] / "schemas" / name
    return repo_file(f"schemas/{name}")


@functools.cache
def job_schema():
    import capnp

    return capnp.load(str(schema_path("job.capnp")))
