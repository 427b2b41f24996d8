"""Ctrl-C and SIGTERM while a job runs: stop it in order; a second Ctrl-C: leave at once.

The first SIGINT or SIGTERM cancels the job's coroutine. Cancellation unwinds through the
runner's `finally` blocks, which are the one way out of a job whatever ends it: the pods are told
to drop the job (`cancel`), staging files are removed (common/storage.py's abort) once the thread
making them is over (scheduler/jobs/job_storage.py: never racing it), the session's connections close
and local pods are stopped. Then `Interrupted` reaches the command line, which
exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).

A second signal while that runs (a pod that does not answer can hold the orderly stop for a few
seconds) ends the process at once, with the same code; staging files may then be left, which the
next run of the job reports and removes.

Local pods run in a session of their own (scheduler/pods/local_pods.py), so a Ctrl-C typed at a
terminal, which signals the whole foreground process group, reaches the scheduler only: the
pods are stopped by it, in order, instead of dying on their own and being reported as lost.
"""

from __future__ import annotations

import os
import signal
import sys

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The job was stopped by a signal; `exit_code` is what the process should exit with."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}: the job was stopped, its pods "
                         "told to drop it, staging removed; outputs keep their previous contents")


async def interruptible(coro):
    """Await `coro`, turning the first SIGINT/SIGTERM into its cancellation and `Interrupted`."""
    import asyncio  # here: the command imports `Interrupted` before it starts its pods

    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            sys.stderr.write(f"error: interrupted again by {signal.Signals(signum).name}: exiting at once\n")
            sys.stderr.flush()
            os._exit(128 + received[0])
        received.append(signum)
        sys.stderr.write(f"interrupted by {signal.Signals(signum).name}: stopping the job "
                         "(press Ctrl-C again to exit at once)\n")
        sys.stderr.flush()
        task.cancel()

    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await task
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0]) from None
        raise
    finally:
        _hand_back(loop, previous)


def _hand_back(loop, previous: dict) -> None:
    """The handlers from before the job back, signals held meanwhile: asyncio's own removal
    leaves the default action (SIGTERM would kill the command in the middle of its report, exit
    -15, pods left to time out) or KeyboardInterrupt, and a signal between the two steps would
    meet it (the command's handler: scheduler/run_cli.py)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            if handler is not None:  # None: set from C, not Python's to restore
                signal.signal(signum, handler)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
