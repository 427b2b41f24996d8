"""The report's model, pure: checking traces, super-tile ownership, re-planning, bytes, summary."""

from __future__ import annotations

import copy
import json

import pytest

from common.errors import UserError
from scheduler.report.model import KINDS, WRAP_AT, build_model, busy_time
from scheduler.report.page import build_report, load_trace, main, write_report
from tests.visualizer.fake_trace import make_trace


def test_add_super_tiles_are_dealt_round_robin():
    model = build_model(make_trace("add", nodes=3, size=7))
    (grid,) = model["grids"]
    assert grid["tensor"] == "c" and grid["rows"] == 1 and grid["cols"] == 7
    assert [c["node"] for c in grid["cells"]] == [0, 1, 2, 0, 1, 2, 0]
    assert [c["start"] for c in grid["cells"]] == [[i * 1048576] for i in range(7)]
    assert all(c["stored"] and not c["replanned"] for c in grid["cells"])
    assert model["super_tiles"] == 7


def test_matmul_grid_is_rows_by_columns_of_the_output():
    model = build_model(make_trace("matmul", nodes=2, size=3))
    (grid,) = model["grids"]
    assert (grid["tensor"], grid["rows"], grid["cols"]) == ("C", 3, 3)
    # row-major index deals the units: (pm, pn) -> 3 * pm + pn
    for cell in grid["cells"]:
        pm, pn = cell["index"]
        assert (cell["row"], cell["col"]) == (pm, pn)
        assert cell["node"] == (3 * pm + pn) % 2


def test_long_strip_is_wrapped_in_reading_order():
    model = build_model(make_trace("add", nodes=2, size=WRAP_AT + 5))
    (grid,) = model["grids"]
    assert grid["wrapped"] and (grid["rows"], grid["cols"]) == (2, WRAP_AT)
    last = grid["cells"][-1]
    assert (last["row"], last["col"]) == (1, 4)


def test_flash_attention_splits_rows_only():
    model = build_model(make_trace("flash_attention", nodes=4, size=8))
    (grid,) = model["grids"]
    assert grid["per_axis"] == [8, 1] and (grid["rows"], grid["cols"]) == (8, 1)
    assert {c["shape"][1] for c in grid["cells"]} == {64}


def test_failure_replans_the_dead_nodes_unstored_super_tiles():
    trace = make_trace("matmul", nodes=3, size=3, fail_node=1)
    model = build_model(trace)
    dead = next(n for n in model["nodes"] if n["node"] == 1)
    assert dead["failed_at"] == pytest.approx(trace["failures"][0]["time"])
    cells = model["grids"][0]["cells"]
    moved = [c for c in cells if c["replanned"]]
    assert moved, "the fixture kills node 1 before it stored everything"
    for cell in moved:
        assert cell["node"] != 1 and cell["generation"] == 1 and cell["stored"]
        assert cell["previous"] == [{"node": 1, "unit": cell["unit"], "generation": 0}]
    assert [c for c in cells if c["previous"]] == moved
    assert model["summary"]["failures"] == 1
    replanned = sum(1 for e in trace["events"] if e["replanned"] and e["kind"] != "serve")
    assert model["summary"]["replanned_events"] == replanned > 0
    assert model["summary"]["failed_events"] == sum(1 for e in trace["events"] if not e["ok"])


def test_bytes_matrix_matches_the_events():
    trace = make_trace("matmul", nodes=3, size=2)
    model = build_model(trace)
    m = model["bytes"]
    assert m["sources"] == ["storage", "node 0", "node 1", "node 2"]
    assert m["destinations"] == ["node 0", "node 1", "node 2", "storage"]
    ok = [e for e in trace["events"] if e["ok"]]
    loads = sum(e["bytes"] for e in ok if e["kind"] == "load")
    fetches = sum(e["bytes"] for e in ok if e["kind"] == "fetch")
    stores = sum(e["bytes"] for e in ok if e["kind"] == "store")
    assert sum(m["values"][0]) == loads > 0
    assert sum(sum(row[:3]) for row in m["values"][1:]) == fetches > 0
    assert sum(row[3] for row in m["values"]) == stores > 0
    served = {n["node"]: n["bytes_served"] for n in trace["summary"]["nodes"]}
    for node in range(3):
        assert sum(m["values"][1 + node][:3]) == served[node]


def test_summary_is_computed_when_the_trace_has_none():
    trace = make_trace("add", nodes=2, size=4)
    given = trace.pop("summary")
    summary = build_model(trace)["summary"]
    assert summary["wall_s"] == pytest.approx(given["wall_s"])
    for mine, theirs in zip(summary["nodes"], given["nodes"], strict=True):
        for key, value in theirs.items():
            assert mine[key] == pytest.approx(value), key


def test_event_columns_are_parallel_and_sorted_per_node():
    trace = make_trace("flash_attention", nodes=2, size=4)
    ev = build_model(trace)["events"]
    n = len(trace["events"])
    for key in ("node", "id", "kind", "start", "end", "bytes", "peer", "unit", "leaf", "generation", "ok"):
        assert len(ev[key]) == n, key
    pairs = list(zip(ev["node"], ev["start"], strict=True))
    assert pairs == sorted(pairs)
    computes = [i for i in range(n) if KINDS[ev["kind"][i]] == "compute"]
    assert computes and all(ev["leaf_names"][ev["leaf"][i]] == "main" for i in computes)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.update(format="other/2"), "format must be"),
        (lambda t: t.pop("job"), "'job' must be an object"),
        (lambda t: t.update(events={}), "'events' must be a list"),
        (lambda t: t["events"][0].update(kind=7), "events[0].kind"),
        (lambda t: t["events"][0].update(end=-1.0), "ends"),
        (lambda t: t["events"][0].update(start="soon"), "events[0].start"),
        (lambda t: t["events"][0].pop("node"), "events[0].node"),
        (lambda t: t["events"][2].update(bytes="many"), "events[2].bytes"),
        (lambda t: t["units"][0]["outputs"][0].pop("shape"), "units[0].outputs"),
        (lambda t: t["units"][1]["outputs"][0].update(start=[0, 0], shape=[1, 1]), "differ in rank"),
    ],
)
def test_malformed_traces_are_user_errors(mutate, message):
    trace = make_trace("add", nodes=2, size=2)
    mutate(trace)
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_model(trace)


def test_page_is_self_contained_and_source_cannot_break_out_of_its_script():
    trace = make_trace("add", nodes=2, size=2)
    trace["job"]["source"] = "// </script><script>alert(1)</script> @@SCRIPT@@\n" + trace["job"]["source"]
    page = build_report(trace)
    assert page.count("</script>") == 3  # the error hook, the data, the report script
    assert "<\\/script><script>alert(1)<\\/script> @@SCRIPT@@" in page
    for external in ("http://", "https://", "src=", "<link"):
        assert external not in page, external


def test_write_report_replaces_the_file_only_when_the_trace_is_good(tmp_path):
    out = tmp_path / "run.html"
    write_report(make_trace("add", nodes=2, size=2), out)
    good = out.read_text()
    assert "<canvas id=\"timeline\">" in good
    bad = copy.deepcopy(make_trace("add", nodes=2, size=2))
    bad["format"] = "nope"
    with pytest.raises(UserError):
        write_report(bad, out)
    assert out.read_text() == good
    assert [p.name for p in tmp_path.iterdir()] == ["run.html"]  # no temp file left behind


def test_cli_writes_the_report_and_names_bad_files(tmp_path, capsys):
    trace_file = tmp_path / "t.json"
    trace_file.write_text(json.dumps(make_trace("matmul", nodes=2, size=2)))
    assert main([str(trace_file), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(UserError, match="trace file not found"):
        main([str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.html")])
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(UserError, match="not JSON"):
        load_trace(tmp_path / "broken.json")
    with pytest.raises(UserError, match="does not exist"):
        main([str(trace_file), "-o", str(tmp_path / "no" / "such" / "r.html")])


def test_thousands_of_super_tiles_wrap_into_a_wide_block():
    model = build_model(make_trace("add", nodes=2, size=5000))
    (grid,) = model["grids"]
    assert grid["cols"] == 100 and grid["rows"] == 50
    assert {(c["row"], c["col"]) for c in grid["cells"]} == {(r, c) for r in range(50) for c in range(100)}


def test_serves_count_as_served_bytes_not_instructions_and_unknown_kinds_are_skipped():
    trace = make_trace("flash_attention", nodes=3, size=6)
    serves = [e for e in trace["events"] if e["kind"] == "serve"]
    assert serves, "the fixture reports a serve on the peer for every fetch, as pods do"
    trace["events"].append({**trace["events"][0], "kind": "teleport"})
    trace.pop("summary")
    model = build_model(trace)
    summary = model["summary"]
    assert summary["skipped_events"] == 1 and summary["serves"] == len(serves)
    assert summary["events"] == len(trace["events"]) - 1 - len(serves)
    for row in summary["nodes"]:
        assert row["bytes_served"] == sum(e["bytes"] for e in serves if e["node"] == row["node"])
    # a fetch and its serve are one movement of bytes: the matrix counts it once
    fetched = sum(e["bytes"] for e in trace["events"] if e["kind"] == "fetch" and e["ok"])
    assert sum(sum(row[:3]) for row in model["bytes"]["values"][1:]) == fetched


def test_busy_time_is_the_union_of_overlapping_intervals():
    assert busy_time([]) == 0
    assert busy_time([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4)
    trace = make_trace("add", nodes=2, size=4)
    for row in build_model(trace)["summary"]["nodes"]:
        assert 0 < row["compute_busy_s"] <= row["compute_s"] + 1e-12


def test_single_gpu_grid_comes_from_binding_the_source_at_the_job_dims():
    model = build_model(make_trace("matmul", nodes=2, size=3))  # M = N = 3 * 4096, tiles of 32
    assert model["single_gpu"] == {"grid": [384, 384], "ctas": 384 * 384, "why_not": None}
    trace = make_trace("add", nodes=2, size=2)
    trace["job"]["source"] = "kernel broken("
    broken = build_model(trace)["single_gpu"]
    assert broken["grid"] is None and broken["why_not"]
