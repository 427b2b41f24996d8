"""`bazel test //:ruff`: ruff over every Python file of the repo (also runs as a plain script).

Bazel runs it from //:ruff's runfiles tree, which holds each package's :py_files. A package left out
of that list would go unchecked silently, so the files are also compared with the checkout, which
the tree's symlinks lead back to.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Besides hidden folders and bazel-*; build/ is what `pip install .` leaves in a checkout (README).
SKIPPED_DIRS = {"third_party", "node_modules", "build"}


def python_files(root: Path) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "bazel-")) and d not in SKIPPED_DIRS]
        found.update(os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".py"))
    return found


def main() -> int:
    here = Path.cwd()
    files = python_files(here)
    checkout = Path(os.path.realpath(here / "pyproject.toml")).parent
    if checkout != here:
        missing = sorted(python_files(checkout) - files)
        if missing:
            print("not checked by //:ruff (add their package's :py_files to its data in BUILD.bazel):")
            print("\n".join(f"  {f}" for f in missing))
            return 1
    print(f"ruff check: {len(files)} files")
    return subprocess.call([sys.executable, "-m", "ruff", "check", "--no-cache", *sorted(files)])


if __name__ == "__main__":
    sys.exit(main())
