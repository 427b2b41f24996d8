"""Helpers shared by the three programs' command lines."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from common.errors import UserError

USER_ERROR_EXIT = 2


def user_path(path: str | os.PathLike) -> Path:
    """Resolve a path the user typed.

    `bazel run` changes the working directory to the runfiles tree; Bazel tells us where the
    user really was through BUILD_WORKING_DIRECTORY, and relative paths are meant from there.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    base = os.environ.get("BUILD_WORKING_DIRECTORY")
    return (Path(base) if base else Path.cwd()) / p


def run_main(main: Callable[[list[str]], int | None], argv: list[str] | None = None) -> None:
    """Run a program's main, turning user errors into one clean message and exit code 2."""
    try:
        code = main(sys.argv[1:] if argv is None else argv)
    except UserError as err:
        print(err.render(), file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)
