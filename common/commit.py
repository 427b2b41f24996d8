"""Committing a job's outputs all together or not at all, even when the scheduler is killed.

One rename is atomic; several are not. So a commit writes a commit record first, one copy
beside each output (`.NAME.npy.phobos-commit-JOBID`, JSON naming every staging copy and its
output), and only then renames:

    1. fsync every staging copy
    2. write the records, one per output (each written whole, durably)   <- rolled back if cut here
       -- commit point: the last record is on disk --
    3. rename every staging copy over its output                         <- finished if cut here
    4. remove the records

A scheduler killed at any point leaves records beside the outputs. `recover` reads one and
decides: if the record of every output exists, the commit point was passed, so it renames the
staging copies that are left (finish); if one is missing, either nothing was renamed yet or the
records were being removed after every rename: it removes the job's staging copies and
records (roll back, or tidy up a commit that had finished). The caller must hold the exclusive
lock of every output the record names (common/locks.py), so it never touches a live commit.

Test-only fault hook: PHOBOS_COMMIT_FAULT=kill-at=STEP:N SIGKILLs the process as it starts the
N-th (from 1) action of STEP (fsync, record, rename, forget), like pod/faults.py for pods.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from common import options
from common.atomic import write_atomically
from common.errors import UserError
from common.fault_points import FaultPoints
from common.fileio import fsync_path
from common.storage import staging_path

RECORD_MARK = ".phobos-commit-"
RECORD_FORMAT = "phobos-commit/1"
FAULT_ENV = options.COMMIT_FAULT
STEPS = ("fsync", "record", "rename", "forget")


class CommitFailed(Exception):
    """The commit could not be made (say, no space for its records); every output is unchanged."""


@dataclass(frozen=True)
class Pair:
    staging: Path
    final: Path


def record_path(final: Path, job_id: str) -> Path:
    final = Path(final)
    return final.with_name(f".{final.name}{RECORD_MARK}{job_id}")


_fault_point = FaultPoints(lambda: options.current().commit_fault, "kill-at", signal.SIGKILL)


def _fsync_folders(paths) -> None:
    for folder in sorted({Path(p).parent for p in paths}):
        fsync_path(folder)


def commit_all(job_id: str, pairs: list[Pair], mark=None) -> None:
    """Make every staging copy its output, all or none (see the module doc). `mark(name)`, when
    given, is called as the staging copies are durable ("commit_synced"), as the commit point is
    passed ("commit_recorded") and as the renames are durable ("commit_renamed"): where a
    commit's time goes, for the trace."""
    mark = mark or (lambda name: None)
    for pair in pairs:
        _fault_point("fsync")
        fsync_path(pair.staging)
    mark("commit_synced")
    text = json.dumps({"format": RECORD_FORMAT, "job": job_id,
                       "outputs": [{"staging": str(p.staging), "final": str(p.final)} for p in pairs]})
    written: list[Path] = []
    try:
        for pair in pairs:
            _fault_point("record")
            record = record_path(pair.final, job_id)
            write_atomically(record, text, durable=True)
            written.append(record)
        _fsync_folders(written)
    except OSError as err:
        for record in written:
            record.unlink(missing_ok=True)
        raise CommitFailed(f"cannot write the commit record {record_path(pair.final, job_id)} "
                           f"({err.strerror}); no output was changed") from None
    mark("commit_recorded")
    old = _hold(p.final for p in pairs)
    try:
        for pair in pairs:  # past the commit point: a cut from here on is finished by `recover`
            _fault_point("rename")
            os.replace(pair.staging, pair.final)
        _fsync_folders([p.final for p in pairs])
        mark("commit_renamed")
        for record in written:
            _fault_point("forget")
            record.unlink()
        _fsync_folders(written)
    finally:
        if old:  # (a job whose outputs are all new holds nothing)
            threading.Thread(target=_close, args=(old,), name="commit-old-outputs", daemon=True).start()


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _hold(finals) -> list[int]:
    """The outputs' old files, opened so that replacing them does not free them: their space is
    given back when these are closed, by a thread of its own once the commit is over. Freeing a
    file is not free: on the ext4 virtual disks we measured (mounted with `discard`) giving back
    a 256 MiB file took 30-80 ms inside the rename (or, held open, inside the close), which the
    commit would otherwise wait for, though the new outputs need nothing of it. Best effort: an
    old file that cannot be opened is freed by its rename, as before."""
    held = []
    for final in finals:
        try:
            held.append(os.open(final, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW))
        except OSError:
            pass  # no old output (a new file), or one we may not read
    return held


def _beside(path: Path, prefix: str, suffix: str = "") -> list[Path]:
    """Files in the folder of `path` whose names start with `prefix` and end with `suffix`."""
    try:
        names = sorted(Path(path).parent.iterdir())
    except OSError:
        return []
    return [p for p in names if p.name.startswith(prefix) and p.name.endswith(suffix)]


def find_records(path: Path) -> list[Path]:
    """Commit records beside the tensor at `path` (left by a scheduler killed while committing)."""
    return _beside(path, f".{Path(path).name}{RECORD_MARK}")


def find_half_written(path: Path) -> list[Path]:
    """Temporaries of records that a killed scheduler was writing (common/atomic.py names them
    `.<record name>.XXXX.tmp`): never a record, only litter, once no live job holds `path`."""
    return _beside(path, f"..{Path(path).name}{RECORD_MARK}", ".tmp")


@dataclass(frozen=True)
class Interrupted:
    """What a record says: the job and its (staging, output) pairs."""

    job_id: str
    pairs: tuple[Pair, ...]

    @property
    def outputs(self) -> tuple[Path, ...]:
        return tuple(p.final for p in self.pairs)


def read_record(record: Path) -> Interrupted:
    try:
        data = json.loads(record.read_text())
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        pairs = tuple(Pair(Path(o["staging"]), Path(o["final"])) for o in data["outputs"])
        job_id = str(data["job"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{record}: not a readable commit record ({err}); move it away to go on") from None
    for pair in pairs:  # a record names only staging copies of its own job, beside their outputs
        if pair.staging != staging_path(pair.final, job_id):
            raise UserError(f"{record}: names {pair.staging}, not the staging copy of {pair.final}; "
                            "move the record away to go on")
    if Path(record) not in {record_path(p.final, job_id) for p in pairs}:
        raise UserError(f"{record}: a commit record of job {job_id} that does not name the output beside "
                        "it; move it away to go on")
    return Interrupted(job_id, pairs)


def recover(interrupted: Interrupted) -> str:
    """Finish or roll back an interrupted commit; returns one line saying which.

    The caller holds the exclusive lock of every output in `interrupted.outputs`."""
    job, pairs = interrupted.job_id, interrupted.pairs
    records = [record_path(p.final, job) for p in pairs]
    names = ", ".join(str(p.final) for p in pairs)
    if all(r.exists() for r in records):
        for pair in pairs:
            if pair.staging.exists():
                os.replace(pair.staging, pair.final)
        _fsync_folders([p.final for p in pairs])
        outcome = f"finished the interrupted commit of job {job}: {names} now hold its results"
    elif any(p.staging.exists() for p in pairs):
        for pair in pairs:
            pair.staging.unlink(missing_ok=True)
        outcome = (f"rolled back the interrupted commit of job {job}: {names} keep their "
                   "previous contents")
    else:
        outcome = f"tidied up after job {job}, whose commit had finished: {names} hold its results"
    for record in records:
        record.unlink(missing_ok=True)
        for half_written in record.parent.glob(f".{record.name}.*.tmp"):  # common/atomic.py's temporaries
            half_written.unlink(missing_ok=True)
    _fsync_folders(records)
    return outcome
