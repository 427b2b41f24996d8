"""Reports of real runs: the scheduler's own --trace on CPU pods, one run with a pod killed part-way.

These check that the page reads what the scheduler really writes (not only the test fixture):
every node row, every super-tile, the failure and the re-planned work, and no script error.
"""

from __future__ import annotations

import json

import pytest

from scheduler.report.chrome_trace import to_chrome_trace
from scheduler.report.model import build_model
from scheduler.report.page import write_report
from tests.visualizer.headless_chromium import dump_dom, find_chromium, parse_dom
from tests.visualizer.real_runs import run_example

needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def render(folder, trace):
    page = folder / "run.html"
    write_report(trace, page)
    run = dump_dom(page, folder / "profile", timeout=120)
    dom = parse_dom(run.stdout)
    assert dom.js_errors == [] and run.uncaught_errors() == []
    assert dom.report["rendered"] == "true"
    return dom.report


def super_tiles(trace) -> int:
    return len({(o["tensor"], tuple(o["start"])) for u in trace["units"] for o in u["outputs"]})


@needs_chromium
@pytest.mark.parametrize("example, pods", [("add", 2), ("matmul", 2), ("flash_attention", 2)])
def test_report_of_a_real_run(tmp_path, example, pods):
    trace = run_example(tmp_path, example, pods=pods)
    report = render(tmp_path, trace)
    assert report["nodes"] == report["node-rows"] == str(pods)
    assert report["supertiles"] == str(super_tiles(trace)) != "0"
    assert int(report["events"]) == sum(e["kind"] != "serve" for e in trace["events"]) > 0
    assert report["failures"] == "0" and report["replanned-events"] == "0"
    # The summary the page shows is the scheduler's own
    model = build_model(trace)
    shown = [{k: v for k, v in row.items() if k != "compute_busy_s"} for row in model["summary"]["nodes"]]
    assert shown == trace["summary"]["nodes"]
    complete = [e for e in to_chrome_trace(trace)["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(trace["events"])
    json.dumps(to_chrome_trace(trace))  # serialisable as it stands


@needs_chromium
@pytest.mark.slow
def test_report_of_a_real_run_with_a_killed_pod(tmp_path):
    trace = run_example(tmp_path, "matmul_1024", pods=3, kill_node=1)
    assert [f["node"] for f in trace["failures"]] == [1]
    report = render(tmp_path, trace)
    assert report["nodes"] == report["node-rows"] == "3"
    assert report["supertiles"] == "64" and report["failures"] == "1"
    replanned = [e for e in trace["events"] if e["replanned"] and e["kind"] != "serve"]
    assert int(report["replanned-events"]) == len(replanned) > 0
    assert int(report["replanned-supertiles"]) > 0
    model = build_model(trace)
    (grid,) = model["grids"]
    moved = [c for c in grid["cells"] if c["replanned"]]
    # every re-planned super-tile now belongs to a live node and was stored there
    assert moved and all(c["node"] != 1 and c["stored"] for c in moved)
    assert all(c["stored"] for c in grid["cells"])
    dead = next(n for n in model["nodes"] if n["node"] == 1)
    assert dead["failed_at"] == pytest.approx(trace["failures"][0]["time"])
