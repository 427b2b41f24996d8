"""The front-end's public entry points: source text or a file -> a checked ir.Module.

    load_text(text, filename="<string>") -> ir.Module   parsed and checked
    load_file(path, display_name=None) -> ir.Module       the same, for a file on disk

Errors in the kernel raise compiler.frontend.diagnostics.CompileError (rendered with the source line);
a missing or unreadable file raises common.errors.UserError.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.errors import UserError
from compiler.frontend import ir
from compiler.frontend.diagnostics import register_source
from compiler.pipeline import run_pipeline


def load_text(text: str, filename: str = "<string>") -> ir.Module:
    register_source(filename, text)
    return run_pipeline(ir.Module(file=filename, text=text), until="check")


def load_file(path: str | os.PathLike, display_name: str | None = None) -> ir.Module:
    """`display_name` is the name errors show (the path as the user typed it); default `path`."""
    p = Path(path)
    name = display_name or str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{name}: is a directory, not a kernel file") from None
    except UnicodeDecodeError:
        raise UserError(f"{name}: not a UTF-8 text file") from None
    except OSError as err:
        raise UserError(f"{name}: cannot read ({err.strerror})") from None
    return load_text(text, name)


def select_kernel(module: ir.Module, name: str | None, flag: str = "--kernel") -> ir.Kernel:
    """The named kernel of `module`, or its only one; else a user error naming the choices and
    the command-line `flag` that picks one."""
    try:
        return module.kernel(name)
    except KeyError:
        names = ", ".join(k.name for k in module.kernels) or "none"
        if name is None:
            raise UserError(f"{module.file} has several kernels ({names}): pick one with {flag}") from None
        raise UserError(f"{module.file} has no kernel {name} (it has: {names})") from None
