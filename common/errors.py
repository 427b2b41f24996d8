"""Errors that are the user's mistake, as opposed to bugs in phobos.

Every program catches `UserError` at its top level (see `common.cli.run_main`), prints its
`render()` text and exits with code 2: a user never sees a Python traceback for their own mistake.

The Python API (package `phobos`, docs/python.md) raises `Error` instead: a UserError whose text is
exactly what the command line prints for the same mistake (`file:line:col: error: message`, the
source line and a caret for a mistake in a kernel; one line naming the bad value otherwise).
"""

import contextlib


class UserError(Exception):
    """A mistake in the user's input: a bad flag, file, value, kernel or job."""

    def render(self) -> str:
        return f"error: {self}"


class Error(UserError):
    """A mistake in the caller's kernel, arguments or job.

    `str(err)` is the full diagnostic (with the caret for kernel errors); `message` is its first
    line's message alone; `file`, `line`, `col` locate a mistake in kernel source (None otherwise)."""

    def __init__(self, text: str, message: str, file: str | None = None, line: int | None = None,
                 col: int | None = None):
        super().__init__(text)
        self._text = text
        self.message = message
        self.file = file
        self.line = line
        self.col = col

    def render(self) -> str:
        return self._text


class ArrayError(Error, ValueError):
    """An array refused before launch (shape, dtype, device, layout); `parameter` names it."""

    def __init__(self, parameter: str, problem: str):
        message = f"tensor {parameter}: {problem}"
        super().__init__(f"error: {message}", message)
        self.parameter = parameter


def as_error(err: UserError) -> Error:
    """The API's form of a user error raised by the modules underneath."""
    if isinstance(err, Error):
        return err
    span = getattr(err, "span", None)
    if span is not None:
        return Error(err.render(), err.message, span.file, span.line, span.col)
    return Error(err.render(), str(err))


@contextlib.contextmanager
def user_errors():
    """Re-raise the user errors of the block as `Error`, without the internal traceback."""
    try:
        yield
    except Error:
        raise
    except UserError as err:
        raise as_error(err) from None
