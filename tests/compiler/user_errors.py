"""The one check of how a user's compile error reads: `bad.phk:line:col: error: ...` on the first
line, the source line and a caret under the column below it, and nothing of the compiler's own
insides (shared by the error tables of test_errors, test_errors_dtypes and test_fp8)."""

from __future__ import annotations

import pytest

from compiler.frontend.diagnostics import CompileError
from compiler.frontend.load import load_text


def assert_reported(source: str, where: str, message: str) -> None:
    with pytest.raises(CompileError) as info:
        load_text(source, "bad.phk")
    text = info.value.render()
    first = text.splitlines()[0]
    assert first.startswith(f"bad.phk:{where}: error: "), text
    assert message in first, text
    for internal in (".py", "compiler/", "Traceback"):
        assert internal not in text, text
    # the caret line sits under the reported column
    line, col = (int(v) for v in where.split(":"))
    lines = text.splitlines()
    assert lines[1] == source.splitlines()[line - 1]
    assert lines[2].index("^") == col - 1
