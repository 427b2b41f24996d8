"""The cluster's token, shared by the scheduler and the pods: from a file or the environment.

It is never taken from the command line (other users can read argv in `ps`) and never logged."""

from __future__ import annotations

import os

from common.cli import user_path
from common.errors import UserError

TOKEN_ENV = "PHOBOS_TOKEN"


def read_token(token_file: str | None) -> str | None:
    """The first line of `token_file`, else $PHOBOS_TOKEN, else None."""
    if token_file:
        path = user_path(token_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise UserError(f"--token-file {path}: {err.strerror}") from None
        if not lines or not lines[0].strip():
            raise UserError(f"--token-file {path}: the file holds no token")
        return lines[0].strip()
    return os.environ.get(TOKEN_ENV, "").strip() or None
