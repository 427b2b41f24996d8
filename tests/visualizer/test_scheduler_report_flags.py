"""The scheduler writes the report and the Chrome trace itself (--report, --chrome-trace), and its
`report` / `chrome-trace` commands make the same files from a saved trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from common.paths import REPO_ROOT, repo_file


def _scheduler(*args: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "scheduler.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_run_writes_report_and_chrome_trace_and_commands_rebuild_them(tmp_path):
    jobs = tmp_path / "jobs"
    shutil.copytree(repo_file("examples/jobs"), jobs, ignore=shutil.ignore_patterns("out", "__pycache__"))
    (jobs / "out").mkdir()
    run = _scheduler("jobs/matmul.capnp", "--expect", "C=jobs/data/C_expected.npy", "--trace", "t.json",
                     "--report", "run.html", "--chrome-trace", "run.chrome.json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    wrote = [line for line in run.stdout.splitlines() if line.startswith("wrote ")]
    assert sorted(wrote) == sorted([  # every file it writes, once, by its path
        f"wrote {jobs / 'out' / 'C.npy'}", f"wrote {tmp_path / 't.json'} (trace)",
        f"wrote {tmp_path / 'run.html'} (HTML report)",
        f"wrote {tmp_path / 'run.chrome.json'} (Chrome trace)",
    ]), run.stdout
    page = (tmp_path / "run.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "kernel matmul" in page
    assert "<script src=" not in page and "http://" not in page.replace("http://www.w3.org", "")
    chrome = json.loads((tmp_path / "run.chrome.json").read_text())
    assert any(e.get("ph") == "X" for e in chrome["traceEvents"])

    again = _scheduler("report", "t.json", "-o", "again.html", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again.html").read_text() == page
    converted = _scheduler("chrome-trace", "t.json", "-o", "again.json", cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    assert json.loads((tmp_path / "again.json").read_text()) == chrome


def test_report_into_a_missing_folder_is_refused_before_the_job_runs(tmp_path):
    result = _scheduler(str(repo_file("examples/jobs/matmul.capnp")), "--report", "nowhere/run.html",
                        cwd=tmp_path)
    assert result.returncode == 2
    assert "--report" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
