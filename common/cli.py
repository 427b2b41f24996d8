"""Helpers shared by the three programs' command lines."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from common import dataclass_code_cache, options
from common.errors import UserError

USER_ERROR_EXIT = 2
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, what a shell reports for a filter killed by it


def user_path(path: str | os.PathLike) -> Path:
    """Resolve a path the user typed.

    `bazel run` changes the working directory to the runfiles tree; Bazel tells us where the
    user really was through BUILD_WORKING_DIRECTORY, and relative paths are meant from there.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    return (options.current().build_working_directory or Path.cwd()) / p


def pause_collection_for_imports() -> None:
    """Python's cycle collector off while a program imports its modules (first thing in its
    entry point). The imports allocate tens of thousands of objects (functions, classes, the
    methods each frozen dataclass execs), which set off about ninety young-generation
    collections finding next to nothing: with them off, importing the command's modules took
    about 5% less CPU (`perf stat -r 8`, 236 against 249 ms). `collect_again` ends the pause."""
    gc.disable()


def collect_again() -> None:
    """The cycle collector back on once a program's imports are done, everything alive by then
    frozen (gc.freeze): the modules stay for the process's life, and no collection need scan
    them again."""
    gc.freeze()
    gc.enable()


def run_main(main: Callable[[list[str]], int | None], argv: list[str] | None = None) -> None:
    """Run a program's main, turning user errors into one clean message and exit code 2."""
    try:
        code = main(sys.argv[1:] if argv is None else argv)
        if sys.stdout is not None:  # None: started with stdout closed (`>&-`), print() wrote nothing
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        # The reader went away (`show-job JOB | head`): stop quietly, as a filter killed by
        # SIGPIPE does, and keep the interpreter's own last flush from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(BROKEN_PIPE_EXIT)
    except UserError as err:
        print(err.render(), file=sys.stderr)
        sys.exit(USER_ERROR_EXIT)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)


def run_main_and_leave(main: Callable[[list[str]], int | None]) -> NoReturn:
    """`run_main`, then leave through os._exit once stdout and stderr are flushed.

    Both long-lived programs hold Cap'n Proto objects: the interpreter's own teardown collects them
    after the KJ loop is gone, a segfault on the way out (seen in pod soak runs) that would turn a
    clean exit into a crash for whoever supervises the process. The teardown also costs a command
    30-40 ms (numpy, capnp and the compiler's modules freed one by one) after its work is done.
    Nothing is lost by skipping it: every file the programs write is closed (and where it matters
    fsynced) before `main` returns, log files are line-buffered, and the worker threads left are
    idle pools, but the dataclass code cache's writer, which `settle` waits for."""
    try:
        run_main(main)
        code = 0
    except SystemExit as done:
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    dataclass_code_cache.settle()  # its writes are not cut short by os._exit
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader gone or a stream closed: nothing more to say
            pass
    os._exit(code)
