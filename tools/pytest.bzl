"""phobos_pytest: one py_test target per test folder, all run by the shared tests/run_pytest.py."""

# Every library of the repo: tests often cross packages, and these are cheap to depend on.
ALL_LIBRARIES = ["//:phobos"]

def phobos_pytest(
        name,
        srcs = None,
        data = ["//docs", "//examples"],
        deps = ALL_LIBRARIES,
        size = "medium",
        timeout = None,
        shard_count = None,
        shard_whole_files = False,
        tags = [],
        args = []):
    """Runs the folder's test_*.py files (subfolders without a BUILD file included) with pytest.

    Args:
      name: the target, by convention the folder's name (so `bazel test //tests/pod` works).
      srcs: Python files; default: every .py file of the folder. Those named test_*.py are run.
      data: more runfiles; default //docs and //examples. The folder's own other files are added.
      deps: the libraries under test; default all of them.
      size, timeout, shard_count, tags, args: as for py_test; args go to pytest. With shard_count,
        tests/run_pytest.py runs every shard_count-th collected test in each shard.
      shard_whole_files: with shard_count, deal whole test files to the shards instead (for
        folders whose tests share a file's fixtures or judge its cases together).

    Nothing is created while the folder has no test files: a py_test that collects no test fails.
    """
    if srcs == None:
        srcs = native.glob(["**/*.py"])
    tests = [s for s in srcs if s.split("/")[-1].startswith("test_")]
    if not tests:
        return
    package = native.package_name()
    own_data = native.glob(
        ["**"],
        exclude = ["**/*.py", "BUILD.bazel", "**/__pycache__/**", "**/.*", "**/.*/**"],
    )
    native.py_test(
        name = name,
        srcs = ["//tests:run_pytest.py"] + srcs,
        main = "//tests:run_pytest.py",
        args = args + (["--phobos-shard-whole-modules"] if shard_whole_files else []) +
               ["%s/%s" % (package, t) for t in tests],
        data = own_data + data,
        deps = deps + ["//tests:conftest", "//tests:job_files", "//tests:parse_counts"],
        size = size,
        timeout = timeout,
        shard_count = shard_count,
        tags = tags,
    )
