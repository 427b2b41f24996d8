"""The report's code panel shows the kernel file as written: its leading comment included."""

from __future__ import annotations

import numpy as np

from common.paths import repo_file
from scheduler.jobs.jobfile import build_job, write_job
from scheduler.jobs.prepare import prepare
from scheduler.report.model import build_model
from scheduler.tracing.tracefile import TraceRecorder


def test_the_trace_and_the_page_keep_the_leading_comment(tmp_path):
    kernel = tmp_path / "add.phk"
    comment = "// c = a + b, split into super-tiles of BLOCK elements\n"
    kernel.write_text(comment + repo_file("examples/add.phk").read_text())
    for name in "ab":
        np.save(tmp_path / f"{name}.npy", np.ones(64, np.float32))
    job = build_job(kernel, None, {"N": 64}, {}, {t: f"file:{t}.npy" for t in "abc"})
    write_job(job, tmp_path / "job.capnp")
    prepared = prepare(job, tmp_path / "job.capnp", [tmp_path], {"BLOCK": 32})
    trace = TraceRecorder(prepared).finish(None, 0.0)
    assert trace["job"]["source"] == kernel.read_text()
    assert build_model(trace)["source"].startswith(comment)
