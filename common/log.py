"""Logging for the three programs: structlog, configured in this one place by each program's main.

Events go to stderr: readable lines on a terminal, JSON lines otherwise (pods, CI and log files are
read by machines). Callers bind what they know, using these names: `job`, `node`, `instruction`.

    log = get_logger(node="pod-0")          # fine at module level, even before configure()
    log.bind(job=job_id).info("instruction done", instruction=7)
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, TextIO

import structlog

from common.cli import user_path
from common.errors import UserError

LEVELS = ("debug", "info", "warning", "error", "critical")


class _Stderr:
    """sys.stderr as it is at each write, not at configure(): pytest swaps it for every test."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


_STDERR = _Stderr()


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send events at `level` and above to `stream` (default: stderr); stdlib `logging` goes there too."""
    out = _STDERR if stream is None else stream
    number, stamp, render = _configure_structlog(level, out)
    # Libraries (asyncio, uvloop) log through the standard library: render them the same way.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=stamp,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *render],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(number)


def configure_for_library(level: str = "warning") -> None:
    """phobos imported by a program (docs/python.md): unless the program configured structlog
    itself, events at `level` and above go to stderr (structlog's own default prints every level
    to stdout, which is the program's). The standard library's logging stays the program's."""
    if not structlog.is_configured():
        _configure_structlog(level, _STDERR)


def _configure_structlog(level: str, out) -> tuple[int, list, list]:
    if level.lower() not in LEVELS:
        raise UserError(f"unknown log level {level!r}; use one of: {', '.join(LEVELS)}")
    number = logging.getLevelName(level.upper())
    stamp = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if out.isatty():
        render = [structlog.dev.ConsoleRenderer()]
    else:
        render = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=[*stamp, structlog.processors.StackInfoRenderer(), *render],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Loggers made before configure() (module level) must pick up this configuration.
        cache_logger_on_first_use=False,
    )
    return number, stamp, render


def get_logger(**bound: Any) -> structlog.typing.FilteringBoundLogger:
    """A logger with `bound` (job=, node=, instruction=, ...) attached to every event it logs."""
    return structlog.get_logger(**bound)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The logging flags every program takes."""
    parser.add_argument("--log-level", default="info", choices=LEVELS, help="least severe level shown")
    parser.add_argument("--log-file", metavar="PATH", help="append JSON log lines to PATH, not stderr")


def configure_from_args(args: argparse.Namespace) -> None:
    """configure() from the flags of add_arguments(); a relative --log-file is the user's, not Bazel's."""
    stream = None
    if args.log_file:
        path = user_path(args.log_file)
        try:
            # Left open on purpose: the program logs to it until it exits.
            stream = open(path, "a", buffering=1, encoding="utf-8")
        except OSError as err:
            raise UserError(f"cannot open log file {path}: {err.strerror}") from None
    configure(args.log_level, stream)
