"""Running phobos-sched as a real process on real files, for the storage-safety tests."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.jobs.jobfile import build_job, write_job

REPO = Path(__file__).resolve().parents[2]
TWO_OUTPUTS = Path(__file__).resolve().parent / "two_outputs.phk"
N = 1024


def env(**extra: str) -> dict[str, str]:
    path = str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return dict(os.environ, PYTHONPATH=path, **extra)


@dataclass
class Done:
    code: int
    out: str
    err: str

    def one_line_error(self) -> str:
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert self.code == 2, (self.code, self.err)
        assert len(lines) == 1 and lines[0].startswith("error: "), self.err
        return lines[0]


def sched(args: list, timeout: float = 120, address_space: int | None = None, **extra_env: str) -> Done:
    """Run phobos-sched to its end; `address_space` caps its memory (RLIMIT_AS) so that a
    runaway allocation fails as a MemoryError instead of thrashing the machine."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    done = subprocess.run([sys.executable, "-m", "scheduler.main", *map(str, args)], cwd=REPO,
                          env=env(**extra_env), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, preexec_fn=limit if address_space else None)
    return Done(done.returncode, done.stdout, done.stderr)


def job_file(folder: Path, kernel: Path, dims: dict[str, int], tensors: dict[str, str],
             scalars: dict[str, float] | None = None, name: str = "job") -> Path:
    """A job file written without new-job's checks (the scheduler must refuse what new-job would)."""
    job = build_job(kernel, None, dims, scalars or {}, tensors)
    path = folder / f"{name}.capnp"
    write_job(job, path)
    return path


def two_output_job(folder: Path) -> Path:
    rng = np.random.default_rng(5)
    np.save(folder / "a.npy", rng.standard_normal(N).astype(np.float32))
    np.save(folder / "b.npy", rng.standard_normal(N).astype(np.float32))
    return job_file(folder, TWO_OUTPUTS, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "s": "file:s.npy",
                                                       "d": "file:d.npy"})


def leftovers(folder: Path) -> list[str]:
    """Staging copies and commit records (lock files are meant to stay)."""
    return sorted(p.name for p in folder.iterdir() if "phobos-staging" in p.name or "phobos-commit" in p.name)


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (a scheduler's local pods)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry.name))
    return found


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a scheduler, then its pods (found first: a dead parent's children are re-parented).
    The scheduler goes first, so it cannot see its pods die and clean up as a failed job would."""
    for pid in [process.pid, *children(process.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, options: str):
    """A real tmpfs at `folder` (root only), unmounted afterwards."""
    import pytest

    folder.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); this test needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
