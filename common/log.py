"""Logging for the three programs: structlog, configured in this one place by each program's main.

Events go to stderr: readable lines on a terminal, JSON lines otherwise (pods, CI and log files are
read by machines). Callers bind what they know, using these names: `job`, `node`, `instruction`.

    log = get_logger(node="pod-0")          # fine at module level, even before configure()
    log.bind(job=job_id).info("instruction done", instruction=7)

structlog itself is imported at the first event that passes the configured level, not before:
a command that logs nothing (a job that runs well, at the default level) never pays for its
import (0.03 s here, about 0.1 s on the H200 host: a tenth of the 0.5 s a command has to reach
its first compute). Where structlog is imported already, configure() applies at once.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from typing import Any, TextIO

from common.cli import user_path
from common.errors import UserError

LEVELS = ("debug", "info", "warning", "error", "critical")
# The standard library's numbers for them: `logging` itself is imported by configure(), not here,
# since a command reads its flags (and starts its pods) before it configures anything.
_NUMBERS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class _Stderr:
    """sys.stderr as it is at each write, not at configure(): pytest swaps it for every test."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


_STDERR = _Stderr()
_pending: tuple[str, Any] | None = None  # a configure() that structlog has not been given yet
_threshold = _NUMBERS["debug"]  # the pending configuration's level: events below it are dropped here
# Two threads' first events can arrive together (a pod logs from its loop and from the thread
# that imports its first job's modules): the second must wait until the first has configured
# structlog, or it would log through structlog's defaults (to stdout) or find nothing pending.
_applying = threading.Lock()


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send events at `level` and above to `stream` (default: stderr); stdlib `logging` goes there too."""
    import logging

    global _pending, _threshold
    out = _STDERR if stream is None else stream
    number = _level_number(level)
    # Libraries (asyncio, uvloop) log through the standard library: render them the same way.
    root = logging.getLogger()
    root.handlers[:] = [_stdlib_handler_class()(out)]
    root.setLevel(number)
    with _applying:
        _pending, _threshold = (level, out), number
    if "structlog" in sys.modules:
        _apply()


def configure_for_library(level: str = "warning") -> None:
    """phobos imported by a program (docs/python.md): unless the program configured structlog
    itself, events at `level` and above go to stderr (structlog's own default prints every level
    to stdout, which is the program's). The standard library's logging stays the program's."""
    import structlog

    _apply()
    if not structlog.is_configured():
        _configure_structlog(level, _STDERR)


def _level_number(level: str) -> int:
    if level.lower() not in LEVELS:
        raise UserError(f"unknown log level {level!r}; use one of: {', '.join(LEVELS)}")
    return _NUMBERS[level.lower()]


def _apply() -> None:
    """Give structlog the configuration that configure() left pending."""
    global _pending
    with _applying:
        if _pending is not None:
            level, out = _pending
            _configure_structlog(level, out)
            _pending = None  # only now: events racing this one wait above, then find it done


def _processors(out) -> tuple[list, list]:
    import structlog

    stamp = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if out.isatty():
        render = [structlog.dev.ConsoleRenderer()]
    else:
        render = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    return stamp, render


def _configure_structlog(level: str, out) -> None:
    import structlog

    stamp, render = _processors(out)
    structlog.configure(
        processors=[*stamp, structlog.processors.StackInfoRenderer(), *render],
        wrapper_class=structlog.make_filtering_bound_logger(_level_number(level)),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Loggers made before configure() (module level) must pick up this configuration.
        cache_logger_on_first_use=False,
    )


@functools.cache
def _stdlib_handler_class():
    """The handler class for standard-library records, made when configure() first needs it."""
    import logging

    class StdlibHandler(logging.Handler):
        """Standard-library records rendered like structlog's events; structlog's formatter is
        made at the first record."""

        def __init__(self, out):
            super().__init__()
            self.out = out
            self.inner: logging.Handler | None = None

        def emit(self, record: logging.LogRecord) -> None:
            if self.inner is None:
                import structlog

                stamp, render = _processors(self.out)
                self.inner = logging.StreamHandler(self.out)
                self.inner.setFormatter(structlog.stdlib.ProcessorFormatter(
                    foreign_pre_chain=stamp,
                    processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *render]))
            self.inner.emit(record)

    return StdlibHandler


class Logger:
    """What get_logger returns: structlog's bound logger, made at the first event that passes the
    configured level (before that, neither structlog nor the logger exists)."""

    __slots__ = ("_bound", "_logger")

    def __init__(self, bound: dict[str, Any]):
        self._bound = bound
        self._logger = None

    def bind(self, **more: Any) -> Logger:
        return Logger({**self._bound, **more})

    def _structlog(self):
        if self._logger is None:
            import structlog

            _apply()
            self._logger = structlog.get_logger(**self._bound)
        return self._logger

    def __getattr__(self, name: str):  # structlog's other methods (new, unbind, ...)
        return getattr(self._structlog(), name)


def _event_method(name: str, number: int):
    def emit(self: Logger, event: str | None = None, *args: Any, **fields: Any):
        if _pending is not None and number < _threshold:
            return None  # below the level configure() asked for: structlog would drop it too
        return getattr(self._structlog(), name)(event, *args, **fields)

    emit.__name__ = name
    return emit


_EVENT_LEVELS = {**_NUMBERS, "exception": _NUMBERS["error"]}
for _name, _number in _EVENT_LEVELS.items():
    setattr(Logger, _name, _event_method(_name, _number))


def get_logger(**bound: Any) -> Logger:
    """A logger with `bound` (job=, node=, instruction=, ...) attached to every event it logs."""
    return Logger(bound)


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
