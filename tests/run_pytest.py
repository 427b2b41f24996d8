"""The pytest runner behind every phobos_pytest target (tools/pytest.bzl); one file, shared by all.

Bazel runs it from the runfiles tree with the target's test files as arguments. It hands pytest the
places Bazel collects results from and honours `bazel test --test_filter=EXPR` (as pytest -k EXPR).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def pytest_args(argv: list[str], env: dict[str, str]) -> list[str]:
    args = ["-rs", *argv]  # -rs: list skip reasons (e.g. "no GPU") in the test log
    if "XML_OUTPUT_FILE" in env:
        args.append(f"--junitxml={env['XML_OUTPUT_FILE']}")
    if "TEST_TMPDIR" in env:
        args.append(f"--basetemp={env['TEST_TMPDIR']}/pytest")
    if env.get("TESTBRIDGE_TEST_ONLY"):
        args += ["-k", env["TESTBRIDGE_TEST_ONLY"]]
    return args


_USES_HYPOTHESIS = re.compile(r"^\s*(from|import)\s+hypothesis\b", re.MULTILINE)


def plugin_args(test_files: list[str]) -> list[str]:
    """Hypothesis's pytest plugin, which its package registers with every pytest run, costs 0.7 s
    of a core to load: about 15 s of a cold `bazel test //...` on two cores, in targets that never
    use it. It is left out where no Python file of the test files' folders imports hypothesis."""
    folders = {Path(f).parent for f in test_files if f.endswith(".py")}
    for folder in folders:
        for source in folder.glob("*.py"):
            if _USES_HYPOTHESIS.search(source.read_text(errors="replace")):
                return []
    return ["-p", "no:hypothesispytest"] if folders else []


def command_folder(env: dict[str, str]) -> str | None:
    """The folder tools/bazel made for this `bazel test` command, shared by all its targets and
    shards; None outside one (plain pytest, or Bazel not started by tools/bazel). PHOBOS_TEST_RUN
    is a link, fixed per checkout, to the newest command's folder."""
    link = env.get("PHOBOS_TEST_RUN")
    if not link:
        return None
    folder = os.path.realpath(link)
    return folder if folder != os.path.abspath(link) and os.path.isdir(folder) else None


def scratch_environment(env: dict[str, str]) -> dict[str, str]:
    """Under Bazel, where tools write their own files: in the test's scratch folder, never in the
    checkout. Many tests start programs (pods, the scheduler) with the checkout on PYTHONPATH; their
    bytecode would otherwise land in compiler/__pycache__ and the like. Inherited by subprocesses.

    Two things go to the command's shared folder instead, when there is one, as each is the same
    for every target: the bytecode (with a prefix Python ignores .venv's own __pycache__ folders, so
    each target compiled numpy, pytest and the checkout again: 3 s of a core per target and shard),
    and the PTX NVRTC makes (tests/conftest.py links it into each run's cache folder)."""
    if "TEST_TMPDIR" not in env:
        return {}
    tmp = env["TEST_TMPDIR"]
    shared = command_folder(env)
    # Hypothesis keeps its example database in the working directory, the runfiles tree here.
    return {"HYPOTHESIS_STORAGE_DIRECTORY": f"{tmp}/hypothesis",
            "PYTHONPYCACHEPREFIX": f"{shared or tmp}/pycache",
            **({"PHOBOS_TEST_SHARED_PTX": f"{shared}/ptx"} if shared else {})}


class Shard:
    """Bazel's test sharding (`shard_count` in a BUILD file): shard INDEX of TOTAL runs every
    TOTAL-th collected test, starting at INDEX, so the parametrized cases of one slow test spread
    over the shards. With `whole_modules` (WHOLE_MODULES among the runner's arguments) it deals
    test files instead, each whole to one shard, in collection order: for folders whose tests share
    a file's state (module fixtures that start pods, a teardown that judges the file's cases together).
    Touching TEST_SHARD_STATUS_FILE tells Bazel that the runner shards."""

    def __init__(self, index: int, total: int, whole_modules: bool = False):
        self.index, self.total, self.whole_modules = index, total, whole_modules

    @classmethod
    def from_env(cls, env: dict[str, str], whole_modules: bool = False) -> Shard | None:
        if int(env.get("TEST_TOTAL_SHARDS", "1")) <= 1:
            return None
        if env.get("TEST_SHARD_STATUS_FILE"):
            with open(env["TEST_SHARD_STATUS_FILE"], "a"):
                pass
        return cls(int(env["TEST_SHARD_INDEX"]), int(env["TEST_TOTAL_SHARDS"]), whole_modules)

    def _unit(self, items: list) -> list[int]:
        """The deal's unit of each item: its position, or its file's among the files."""
        if not self.whole_modules:
            return list(range(len(items)))
        files: dict[str, int] = {}
        return [files.setdefault(item.nodeid.split("::")[0], len(files)) for item in items]

    def pytest_collection_modifyitems(self, config, items: list) -> None:
        units = self._unit(items)
        mine = [item for unit, item in zip(units, items, strict=True) if unit % self.total == self.index]
        others = [item for unit, item in zip(units, items, strict=True) if unit % self.total != self.index]
        if others:
            config.hook.pytest_deselected(items=others)
        items[:] = mine


# A runner argument, not pytest's: shard by whole test files (Shard), set by phobos_pytest.
WHOLE_MODULES = "--phobos-shard-whole-modules"


def empty_scratch(tmp: str) -> None:
    """After a passing run, remove what it wrote to TEST_TMPDIR (pytest's folders, bytecode). Bazel
    would otherwise delete it at the start of the next command, while planting the execroot's
    symlinks, even when every test result is cached: that took 43 s of the second `bazel test
    //...` on a fresh clone of the shared 2-core machine. A failing run keeps its files for a look."""
    import shutil

    for entry in os.scandir(tmp):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def cpu_line() -> str:
    """The run's processor time, for the test log: a cold `bazel test //...` on 2 cores can take
    no less than the sum of these over its targets, halved (test.xml holds wall times only)."""
    import resource

    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return (f"cpu s: this process {own.ru_utime + own.ru_stime:.1f}, "
            f"the programs it started {children.ru_utime + children.ru_stime:.1f}")


if __name__ == "__main__":
    # Python put this script's folder, symlinks resolved, first on sys.path: that is tests/ in the
    # checkout, where tests/compiler would pass for the compiler package. Imports come from the
    # runfiles tree only (pytest adds its root, see pythonpath in pyproject.toml).
    del sys.path[0]
    for name, value in scratch_environment(dict(os.environ)).items():
        os.environ.setdefault(name, value)
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]  # this process too, not only its children
    import pytest

    argv = [a for a in sys.argv[1:] if a != WHOLE_MODULES]
    shard = Shard.from_env(dict(os.environ), whole_modules=WHOLE_MODULES in sys.argv[1:])
    args = plugin_args(argv) + pytest_args(argv, dict(os.environ))
    code = pytest.main(args, plugins=[shard] if shard else [])
    if code == pytest.ExitCode.NO_TESTS_COLLECTED and shard:
        code = 0  # more shards than tests: this one has nothing to do
    print(cpu_line())
    if code == 0 and os.environ.get("TEST_TMPDIR"):
        empty_scratch(os.environ["TEST_TMPDIR"])
    sys.exit(code)
