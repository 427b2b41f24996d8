"""Waiting for a child process's end without reaping it: through a pidfd, which the kernel makes
readable when the process ends, where there is one (Popen.wait with a timeout polls, with sleeps
growing to 50 ms: a local pod's end was seen 5-10 ms late), else by polling. Shared by the
local pods' handle (scheduler/pods/local_pods.py) and a forked pod's (scheduler/pods/forked_pod.py)."""

from __future__ import annotations

import os
from collections.abc import Callable


def pidfd_of(pid: int) -> int | None:
    """A pidfd of the process (readable once it ends), or None: not Linux, a kernel before 5.3,
    or a process already reaped."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_for_end(pid: int, timeout_s: float, ended: Callable[[], bool]) -> None:
    """Return once the process has ended, or after `timeout_s`. `ended` says whether it has
    (reaping it), for the polling where there is no pidfd."""
    pidfd = pidfd_of(pid)
    if pidfd is None:
        import time

        deadline = time.monotonic() + timeout_s
        while not ended() and time.monotonic() < deadline:
            time.sleep(0.005)
        return
    try:
        wait_readable(pidfd, timeout_s)
    finally:
        os.close(pidfd)


def wait_readable(fd: int, timeout_s: float) -> None:
    """Wait up to `timeout_s` for `fd` to be readable (a pidfd: its process has ended). poll,
    not select: select refuses a descriptor past 1023, which a process holding many has."""
    import math
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(math.ceil(max(0.0, timeout_s) * 1000))
