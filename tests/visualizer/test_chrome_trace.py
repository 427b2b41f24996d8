"""The Chrome trace-event form of a run: processes per node, threads per kind, µs complete events."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from common.errors import UserError
from scheduler.report.chrome_trace import main, to_chrome_trace
from scheduler.report.model import KINDS
from tests.visualizer.fake_trace import make_trace


def _names(events, what):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == what}


def test_one_process_per_node_and_one_thread_per_kind():
    trace = make_trace("matmul", nodes=3, size=2)
    events = to_chrome_trace(trace)["traceEvents"]
    processes = _names(events, "process_name")
    assert sorted(pid for pid, _ in processes) == [0, 1, 2]
    assert all(name.startswith(f"node {pid}") for (pid, _), name in processes.items())
    threads = _names(events, "thread_name")
    for node in range(3):
        assert [threads[(node, tid)] for tid in range(len(KINDS))] == list(KINDS)


def test_every_instruction_is_a_complete_event_in_microseconds():
    trace = make_trace("flash_attention", nodes=2, size=4)
    complete = [e for e in to_chrome_trace(trace)["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(trace["events"])
    by_key = {(e["node"], e["id"], e["kind"]): e for e in trace["events"]}
    for ce in complete:
        src = by_key[(ce["pid"], ce["args"]["id"], ce["cat"])]
        assert ce["tid"] == KINDS.index(src["kind"])
        assert ce["ts"] == pytest.approx(src["start"] * 1e6)
        assert ce["dur"] == pytest.approx((src["end"] - src["start"]) * 1e6)
        assert ce["args"]["bytes"] == src["bytes"]
    assert Counter(e["cat"] for e in complete) == Counter(e["kind"] for e in trace["events"])


def test_failure_and_replanned_work_are_visible():
    trace = make_trace("add", nodes=3, size=9, fail_node=2)
    events = to_chrome_trace(trace)["traceEvents"]
    (instant,) = [e for e in events if e["ph"] == "i"]
    assert instant["pid"] == 2 and instant["ts"] == pytest.approx(trace["failures"][0]["time"] * 1e6)
    assert "FAILED" in _names(events, "process_name")[(2, 0)]
    replanned = [e for e in events if e["ph"] == "X" and e["args"]["replanned"]]
    assert replanned and all("(re-planned)" in e["name"] for e in replanned)
    assert all(e["pid"] != 2 for e in replanned)


def test_cli_round_trip(tmp_path):
    src = tmp_path / "t.json"
    src.write_text(json.dumps(make_trace("add", nodes=2, size=2)))
    out = tmp_path / "t.chrome.json"
    assert main([str(src), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["displayTimeUnit"] == "ms" and data["otherData"]["kernel"] == "add"
    with pytest.raises(UserError, match="format must be"):
        to_chrome_trace({"format": "x", "job": {}})
