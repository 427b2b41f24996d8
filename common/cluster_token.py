"""The cluster's token, shared by the scheduler and the pods: from a file or the environment.

It is never taken from the command line (other users can read argv in `ps`) and never logged."""

from __future__ import annotations

from common import options
from common.cli import user_path
from common.errors import UserError

TOKEN_ENV = options.TOKEN
# A shorter token can be guessed: even throttled (pod/rpc/gate.py), one of a few bytes falls to a
# patient stranger. 16 bytes of a random URL-safe string carry about 96 bits.
MIN_TOKEN_BYTES = 16
HOW_TO_MAKE_ONE = ("make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > token "
                   "&& chmod 600 token (then --token-file token)")


def read_token(token_file: str | None) -> str | None:
    """The first line of `token_file`, else $PHOBOS_TOKEN, else None; a token shorter than
    MIN_TOKEN_BYTES is refused, saying how to make a good one."""
    if token_file:
        path = user_path(token_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise UserError(f"--token-file {path}: {err.strerror}") from None
        if not lines or not lines[0].strip():
            raise UserError(f"--token-file {path}: the file holds no token")
        return _long_enough(lines[0].strip(), f"--token-file {path}")
    token = (options.current().token or "").strip() or None
    return _long_enough(token, f"${TOKEN_ENV}") if token else None


def _long_enough(token: str, source: str) -> str:
    size = len(token.encode())
    if size < MIN_TOKEN_BYTES:
        raise UserError(f"{source}: the token is {size} bytes, shorter than the {MIN_TOKEN_BYTES} "
                        f"a cluster token needs; {HOW_TO_MAKE_ONE}")
    return token
