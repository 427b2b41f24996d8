"""phobos_package: a source package's library, its optional program, and its files for //:ruff."""

def phobos_package(library, program = None, deps = []):
    """The targets every source package of phobos has.

    Args:
      library: the py_library's name: every .py file of the package (subfolders without a BUILD
        file included), main.py too so that tests can import a command line, and the package's
        other files (templates, assets, schemas), which travel with its code.
      program: when given, a py_binary of that name running main.py (//compiler, //pod, ...).
      deps: the libraries it imports.
    """
    native.py_library(
        name = library,
        srcs = native.glob(["**/*.py"]),
        data = native.glob(
            ["**"],
            exclude = ["**/*.py", "BUILD.bazel", "**/__pycache__/**"],
        ),
        visibility = ["//visibility:public"],
        deps = deps,
    )
    if program:
        native.py_binary(
            name = program,
            srcs = ["main.py"],
            main = "main.py",
            deps = [":" + library],
        )
    native.filegroup(
        name = "py_files",
        srcs = native.glob(["**/*.py"]),
        visibility = ["//visibility:public"],
    )
