"""Every `from project.module import name` in the project names something that module defines.

A module that moves its public calls (compiler/cuda's `__init__` became a docstring when the
calls moved to compiled.py) breaks the scripts that still import the old place. The GPU
benchmarks and device scripts never run in CI, which has no GPU, so the break would show only
on the GPU machine, costing device time. This reads the imports from the source instead of
running the scripts: importing them would need cupy, torch or triton.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")
# The packages and tests are imported by the test run itself; these scripts are not.
SCANNED = ("benchmarks", "tools")


def _python_files() -> list[Path]:
    files = []
    for folder in SCANNED:
        files += sorted((REPO_ROOT / folder).rglob("*.py"))
    return [f for f in files if ".venv" not in f.parts and not f.name.startswith(".")]


def _project_from_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) for each `from <project module> import <name>` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PACKAGES:
                found += [(node.lineno, node.module, a.name) for a in node.names if a.name != "*"]
    return found


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_imported_names_exist(path):
    missing = []
    for line, module_name, name in _project_from_imports(path):
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            continue
        try:  # a submodule, as in `from compiler.cuda import autotune`
            importlib.import_module(f"{module_name}.{name}")
        except ModuleNotFoundError:
            missing.append(f"{path.relative_to(REPO_ROOT)}:{line}: {module_name} has no {name!r}")
    assert not missing, "\n".join(missing)
