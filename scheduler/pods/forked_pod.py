"""A local CPU pod forked from the command, not started as a fresh interpreter.

A fresh interpreter (`python -m pod.main`) spends its first 20-25 ms on the interpreter's own
start and the module runner before the pod's imports begin; the command has done that already,
and at the moment it starts its pods it has loaded little else (argparse and our flag modules:
tests/scheduler/test_local_pods_start.py keeps it so). A child forked then starts on the pod's
imports at once: it listened 24 ms sooner here (median of 8, 0.140 against 0.164 s), and the
local pod is what a command waits for last.

Forking is safe only from a process with nothing heavy loaded and no other thread: numpy's BLAS
threads would be set for the command, not the pod, and a thread's locks would be copied held.
`can_fork` says when; otherwise, and for GPU pods, the pod starts fresh. The child takes the
environment the fresh pod would have got, its own session, stdin from /dev/null, its stdout into
a pipe, none of the descriptors the command inherited nor its earlier pods' pipes (as a fresh
pod, started with close_fds), the name `phobos-pod` (what `ps -o comm`, `top` and `pgrep
phobos-pod` show; its command line stays the command's, so `pgrep -f` with the command's
arguments finds it too), and leaves through os._exit whatever happens: it never returns into
the command's code.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
from contextlib import contextmanager

from common import options as env_options
from scheduler.pods import process_end

POD_PROCESS_NAME = "phobos-pod"
POD_MODULE = "pod.main"
# The read ends of the pods' stdout pipes this process has forked: a pod forked later gets a copy
# of each, which it covers (its sibling's pipe is not its to hold open).
_POD_STDOUTS: weakref.WeakSet = weakref.WeakSet()


def can_fork(device: str, module: str) -> bool:
    """Whether a pod on `device` running `module` may be forked from this process now."""
    return (device == "cpu" and module == POD_MODULE and hasattr(os, "fork") and "numpy" not in sys.modules
            and threading.active_count() == 1)


class ForkedChild:
    """What PodProcess uses of a subprocess.Popen, for a forked pod: pid, stdout, returncode,
    poll, wait, terminate, kill (exit codes as Popen gives them: -N for a signal N)."""

    def __init__(self, pid: int, stdout):
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._reap(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is not None:
            return self.returncode
        if timeout is None:
            self._reap(0)
            return self.returncode
        process_end.wait_for_end(self.pid, timeout, lambda: self.poll() is not None)
        if self.poll() is None:
            import subprocess  # Popen's own error, for callers of either; loaded only when needed

            raise subprocess.TimeoutExpired(POD_PROCESS_NAME, timeout)
        return self.returncode

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:
            # Reaped by the kernel (the command inherited SIGCHLD ignored): its exit code is
            # lost, and 0 is what Popen says then too.
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_held(active: bool):
    """SIGINT and SIGTERM held while a pod is forked and put on its command's list, so that one
    arriving then (it unwinds the command, which stops the pods on the list) cannot leave the
    pod off the list, listening for a scheduler that never comes. Only around a fork: a fresh
    interpreter would inherit the held signals (Popen keeps the caller's signal mask)."""
    if not active:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def fork_pod(pod_args: list[str], env: dict[str, str], cwd: str) -> ForkedChild:
    """Fork a pod with the command line `pod_args` (what follows `python -m pod.main`)."""
    for stream in (sys.stdout, sys.stderr):  # nothing the command has buffered is written twice
        try:
            if stream is not None:  # None: the command was started with that stream closed
                stream.flush()
        except (OSError, ValueError):  # a reader gone or a stream closed: nothing to write twice
            pass
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            _become_pod(pod_args, env, cwd, write_end)  # leaves through os._exit itself
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(70)  # EX_SOFTWARE: the set-up failed before the pod's own entry point
    os.close(write_end)
    stdout = os.fdopen(read_end, "rb")
    _POD_STDOUTS.add(stdout)
    return ForkedChild(pid, stdout)


def _become_pod(pod_args: list[str], env: dict[str, str], cwd: str, stdout_fd: int) -> None:
    os.setsid()  # as Popen's start_new_session: a Ctrl-C at the terminal reaches the command only
    os.dup2(stdout_fd, 1)
    os.close(stdout_fd)
    if sys.stdout is None:  # the command was started with stdout closed: the pod's line needs one
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the process's own stdout
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for sibling in list(_POD_STDOUTS):
        if not sibling.closed:  # /dev/null over it, not closed: its file object still owns the number
            os.dup2(stdin, sibling.fileno())
    os.close(stdin)
    _close_inherited_fds()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the command's handler unwinds the command
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)  # held by the command around the fork
    os.chdir(cwd)
    env_options.replace_environment(env)  # before numpy loads: the pod's BLAS threads, its token
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(POD_PROCESS_NAME)
    except OSError:  # not Linux: the name stays the interpreter's
        pass
    sys.argv = [sys.argv[0], *pod_args]  # argv[0] becomes pod/main.py's path, as with -m
    import runpy

    # As `python -m pod.main` would: the pod named by its module, as the command names it to a
    # fresh interpreter (the scheduler's layer imports nothing of the pod's); its entry point
    # leaves through os._exit.
    runpy.run_module(POD_MODULE, run_name="__main__", alter_sys=True)


def _close_inherited_fds() -> None:
    """Close the descriptors above stderr that the command inherited from whoever started it (a
    lock file's, a harness's pipe): a fresh pod, started with close_fds, never holds them, and a
    forked one would hold them for its whole life, a lock or a pipe's end kept open after the
    command has gone. They are the inheritable ones: Python opens every descriptor of its own
    close-on-exec (PEP 446), and those stay open, as objects of this copied process still own
    them (closing one, its number reused, a later close by its owner would end the pod's own)."""
    import fcntl

    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # not Linux: every descriptor a process may have
        fds = range(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
    for fd in fds:
        try:
            if fd > 2 and not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                os.close(fd)
        except OSError:  # the listing's own descriptor, gone by now
            pass
