"""What the command loads to run a job: nothing that only some jobs need. Each run is a fresh
interpreter with a real local pod; the modules named here were once imported at a module's top."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

from tests.job_files import make_job, write_inputs

REPO = Path(__file__).resolve().parents[2]
N = 1024


def run_command(job: Path, *flags: str) -> subprocess.CompletedProcess:
    probe = ("import sys\n"
             "from scheduler.cli import main\n"
             f"code = main([{str(job)!r}, '--local-pods', '1', *{list(flags)!r}])\n"
             "late = ('ml_dtypes', 'compiler.cuda.target',  # bf16 tensors only; GPU pods only\n"
             "        'compiler.cluster.combine', 'compiler.cluster.reductions')  # a cluster loop's\n"
             "print('loaded:', [m for m in late if m in sys.modules], flush=True)\n"
             "sys.exit(code)\n")
    return subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_an_f32_elementwise_job_on_a_cpu_pod_loads_only_what_it_needs(tmp_path):
    write_inputs(tmp_path, {"a": np.arange(N, dtype=np.float32), "b": np.ones(N, np.float32)})
    job = make_job(tmp_path, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    done = run_command(job)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "loaded: []"
    assert np.array_equal(np.load(tmp_path / "c.npy"), np.arange(N, dtype=np.float32) + 1)


def test_a_bf16_input_where_f32_is_declared_is_one_line_and_exit_2(tmp_path):
    """ml_dtypes loads late, while the command reads the header: the error stays the user's."""
    write_inputs(tmp_path, {"a": np.arange(N, dtype=np.float32), "b": np.ones(N, np.float32)})
    job = make_job(tmp_path, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    np.save(tmp_path / "b.npy", np.ones(N, ml_dtypes.bfloat16))  # replaced after new-job checked it
    done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "b.npy: holds bf16[1024], expected f32[1024]" in lines[0]
    assert not (tmp_path / "c.npy").exists()

