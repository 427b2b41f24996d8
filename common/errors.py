"""Errors that are the user's mistake, as opposed to bugs in phobos.

Every program catches `UserError` at its top level (see `common.cli.run_main`), prints its
`render()` text and exits with code 2: a user never sees a Python traceback for their own mistake.
"""


class UserError(Exception):
    """A mistake in the user's input: a bad flag, file, value, kernel or job."""

    def render(self) -> str:
        return f"error: {self}"
