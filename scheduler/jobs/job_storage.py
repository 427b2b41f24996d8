"""A job's hold on its files, from its locks to its commit or abort.

    open:    finish or roll back commits that a killed scheduler left beside the job's tensors
             (common/commit.py) -> lock: shared on inputs, exclusive on outputs (common/locks.py)
             -> remove staging copies that killed jobs left beside them (the locks prove that no
             live job owns one)
    stage:   create every output's staging copy, its space reserved on disk; `stage_beside`
             does it in a thread of its own, beside the job's compile, plan and first reads
    commit:  all outputs at once, through a commit record
    abandon: wait for the staging thread, then remove the staging copies and drop the locks (a
             failed, stopped or interrupted job)

`abandon` is the one way out of an open job, whatever ends it (scheduler/running/run.py's `finally`,
which a Ctrl-C or SIGTERM unwinds through: scheduler/running/interrupt.py). It waits for a staging
thread still running rather than racing it: a copy that thread is creating would otherwise be
left behind (created after the removal) or removed under a store about to use it. A job whose
commit has begun is left to finish (or to be finished by the next run): removing staging copies
past the commit point would mix old and new outputs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

from common import commit, storage
from common.locks import Locks
from common.log import get_logger
from scheduler.jobs.coverage import unwritten_regions

log = get_logger(program="scheduler")


def notice(text: str) -> None:
    """Tell the user about something done to their files on the way (not an error)."""
    log.debug("storage", message=text)
    print(f"note: {text}", file=sys.stderr, flush=True)


class JobStorage:
    def __init__(self, prepared):
        self.prepared = prepared
        self.locks = Locks(prepared.job_id)
        self.staged: dict[str, Path] = {}
        self.committing = False
        self.staging: threading.Thread | None = None  # stage_beside's thread

    @classmethod
    def open(cls, prepared, say=notice) -> JobStorage:
        files = cls(prepared)
        try:
            files._recover_interrupted(say)
            for place in prepared.tensors.values():
                files.locks.take(place.name, place.path, exclusive=place.role != "input")
            files._remove_stale_staging(say)
        except BaseException:
            files.abandon()
            raise
        return files

    def _recover_interrupted(self, say) -> None:
        for place in self.prepared.tensors.values():
            for record in commit.find_records(place.path):
                interrupted = commit.read_record(record)  # it names place.path, or it is refused
                held = Locks(f"{self.prepared.job_id} (recovering job {interrupted.job_id})")
                try:
                    for output in interrupted.outputs:
                        held.take(place.name if output == place.path else output.name, output, exclusive=True)
                    say(commit.recover(interrupted))
                finally:
                    held.release()

    def _remove_stale_staging(self, say) -> None:
        for place in self.prepared.tensors.values():
            for stale in storage.find_stale_staging(place.path.parent):
                if stale.name.startswith(f".{place.path.name}{storage.STAGING_MARK}"):
                    job = stale.name.rpartition(storage.STAGING_MARK)[2]
                    storage.abort(stale)
                    say(f"removed {stale}, a staging copy left by job {job}, which was stopped "
                        "before its commit")
            for half in commit.find_half_written(place.path):
                half.unlink(missing_ok=True)
                say(f"removed {half}, a commit record that a stopped job had not finished writing")

    def stage(self) -> dict[str, Path]:
        """A staging copy per output. Of an existing output only the regions no unit writes are
        copied (scheduler/jobs/coverage.py): every store overwrites its whole region, so an output the
        job writes whole goes straight into its new file without a copy of the old one."""
        for place in self.prepared.outputs:
            staging = self.staged[place.name] = storage.create_staging(
                place.path, place.shape, place.dtype, self.prepared.job_id)
            if place.path.exists():
                gaps = unwritten_regions(self.prepared.program, place.name, tuple(place.shape))
                if gaps:
                    storage.check_tensor(place.path, tuple(place.shape), place.dtype)
                    storage.copy_regions(place.path, staging, gaps)
        return dict(self.staged)

    def stage_beside(self, mark: Callable[[str], None],
                     when_done: Callable[[BaseException | None], None]) -> None:
        """Run `stage` in a thread of its own. It stamps `mark("staging_start")` and
        `mark("staging_end")`, then calls `when_done(error)` from that thread: None when every
        copy exists, else what `stage` raised (its copies so far are removed by `abandon`)."""

        def work() -> None:
            mark("staging_start")
            error = None
            try:
                self.stage()
            except BaseException as err:  # handed to the job, which fails with it
                error = err
            mark("staging_end")
            when_done(error)

        thread = threading.Thread(target=work, name="phobos-staging", daemon=True)
        thread.start()
        self.staging = thread

    def commit(self, mark=None) -> None:
        """Commit every output at once; a CommitFailed leaves every output unchanged. `mark`:
        common/commit.py's commit_all."""
        pairs = [commit.Pair(path, self.prepared.tensors[name].path) for name, path in self.staged.items()]
        self.committing = True
        try:
            commit.commit_all(self.prepared.job_id, pairs, mark)
        except commit.CommitFailed:
            self.committing = False
            raise
        self.staged = {}
        self.abandon()

    def abandon(self) -> None:
        """Remove this job's staging copies and drop its locks, once the staging thread (if
        any) is over; safe to call twice."""
        if self.committing and self.staged:
            return  # see the module doc: the commit finishes, or its record lets a later run do it
        if self.staging is not None:
            self.staging.join()
        staged, self.staged = self.staged, {}
        for path in staged.values():
            storage.abort(path)
        self.locks.release()
