"""common.log: JSON lines off a terminal, readable lines on one, levels, bound fields, stdlib logs."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os

import pytest
import structlog

from common import log
from common.errors import UserError

early = log.get_logger(node="made-before-configure")


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_bound_fields_level_and_time():
    out = io.StringIO()
    log.configure("info", out)
    log.get_logger(job="j1", node="pod-0").bind(instruction=7).info("fetched", bytes=128)
    [event] = events(out)
    assert event["event"] == "fetched"
    assert (event["job"], event["node"], event["instruction"], event["bytes"]) == ("j1", "pod-0", 7, 128)
    assert event["level"] == "info"
    assert event["timestamp"].endswith("Z")


def test_level_filters_less_severe_events():
    out = io.StringIO()
    log.configure("warning", out)
    logger = log.get_logger()
    logger.info("hidden")
    logger.warning("shown")
    assert [e["event"] for e in events(out)] == ["shown"]


def test_loggers_made_before_configure_follow_it():
    out = io.StringIO()
    log.configure("debug", out)
    early.debug("late")
    [event] = events(out)
    assert (event["event"], event["level"], event["node"]) == ("late", "debug", "made-before-configure")


def test_exceptions_become_structured_fields():
    out = io.StringIO()
    log.configure("info", out)
    try:
        raise ValueError("bad tile")
    except ValueError:
        log.get_logger().exception("failed")
    [event] = events(out)
    assert event["exception"][0]["exc_type"] == "ValueError"


def test_stdlib_logging_is_rendered_as_json_too():
    out = io.StringIO()
    log.configure("info", out)
    logging.getLogger("asyncio").warning("slow callback %s", "cb")
    [event] = events(out)
    assert (event["event"], event["level"]) == ("slow callback cb", "warning")


def test_terminal_gets_readable_lines():
    reader, writer = os.openpty()
    with open(writer, "w", closefd=True) as tty:
        log.configure("info", tty)
        log.get_logger(job="j1").info("started")
        tty.flush()
        text = os.read(reader, 4096).decode()
    os.close(reader)
    assert "started" in text and "job" in text and "j1" in text
    assert not text.lstrip().startswith("{")


def test_default_stream_is_stderr_as_it_is_at_each_event(capsys):
    log.configure("info")
    log.get_logger().info("first")
    assert json.loads(capsys.readouterr().err)["event"] == "first"
    with contextlib.redirect_stderr(io.StringIO()) as swapped:
        log.get_logger().info("second")
    assert json.loads(swapped.getvalue())["event"] == "second"


def test_unknown_level_is_a_user_error():
    with pytest.raises(UserError, match="unknown log level 'loud'"):
        log.configure("loud")


def test_relative_log_file_is_resolved_where_the_user_ran_bazel(tmp_path, monkeypatch):
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # bazel run's working directory is elsewhere
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(user_dir))
    log.configure_from_args(argparse.Namespace(log_level="info", log_file="run.log"))
    log.get_logger(job="j2").info("to file")
    [event] = [json.loads(line) for line in (user_dir / "run.log").read_text().splitlines()]
    assert (event["event"], event["job"]) == ("to file", "j2")


def test_unwritable_log_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot open log file"):
        log.configure_from_args(argparse.Namespace(log_level="info", log_file=str(tmp_path / "no/dir/x.log")))


FIRST_EVENTS_TOGETHER = r"""
import io, json, sys, threading, time
from common import log
stream = io.StringIO()
log.configure("info", stream)
assert "structlog" not in sys.modules  # the lazy path: configured at the first event
configuring = threading.Event()
real = log._configure_structlog
def slow_configure(level, out):
    configuring.set()
    time.sleep(0.3)  # widens the window in which the second thread's first event arrives
    real(level, out)
log._configure_structlog = slow_configure
errors = []
def first_event(name, after=None):
    if after is not None:
        after.wait()
    try:
        log.get_logger().info(name)
    except Exception as err:
        errors.append(repr(err))
threads = [threading.Thread(target=first_event, args=("first",)),
           threading.Thread(target=first_event, args=("second", configuring))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"errors": errors, "lines": stream.getvalue().splitlines()}))
"""


def test_two_threads_first_events_both_reach_the_configured_stream():
    """A second thread's first event, arriving while the first thread configures structlog, waits
    for it and lands in the configured stream (not on stdout through structlog's defaults, and
    with no error). Run in a fresh interpreter: structlog must not be imported yet."""
    import subprocess
    import sys

    from common.paths import REPO_ROOT

    run = subprocess.run([sys.executable, "-c", FIRST_EVENTS_TOGETHER], cwd=REPO_ROOT, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=True)
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["errors"] == []
    assert sorted(json.loads(line)["event"] for line in out["lines"]) == ["first", "second"], run.stdout
