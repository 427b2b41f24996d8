"""The report page in a real browser: headless Chromium runs its scripts, we read the DOM it leaves.

The page writes what it drew into data-* attributes of #report (super-tiles, node rows, the view,
whether the @cluster line is hidden) and every script error into #js-errors; Chromium's own log
(--enable-logging=stderr) is scanned for "Uncaught" as well.
"""

from __future__ import annotations

import pytest

from scheduler.report.page import write_report
from tests.visualizer.fake_trace import make_trace
from tests.visualizer.headless_chromium import dump_dom, find_chromium, parse_dom, screenshot

pytestmark = pytest.mark.skipif(
    find_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)"
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def render(tmp_path, trace, fragment=""):
    page = tmp_path / "run.html"
    write_report(trace, page)
    run = dump_dom(page, tmp_path / "profile", timeout=120, fragment=fragment)
    dom = parse_dom(run.stdout)
    assert dom.js_errors == []
    assert run.uncaught_errors() == []
    assert dom.report.get("rendered") == "true", "the page's script did not finish"
    return page, dom


def instructions(trace) -> list[dict]:
    return [e for e in trace["events"] if e["kind"] != "serve"]


def expected_super_tiles(trace) -> int:
    return len({(o["tensor"], tuple(o["start"])) for u in trace["units"] for o in u["outputs"]})


@pytest.mark.parametrize(
    "example, nodes, fail_node",
    # fixture traces with a failure; clean runs of every example are in test_real_runs.py
    [("matmul", 3, 2), ("flash_attention", 4, 0)],
)
def test_examples_render_with_every_node_row_and_super_tile(tmp_path, example, nodes, fail_node):
    trace = make_trace(example, nodes=nodes, fail_node=fail_node)
    _, dom = render(tmp_path, trace)
    r = dom.report
    assert int(r["node-rows"]) == int(r["nodes"]) == nodes
    assert int(r["supertiles"]) == expected_super_tiles(trace)
    assert int(r["events"]) == len(instructions(trace))
    assert int(r["serves"]) == len(trace["events"]) - len(instructions(trace))
    assert int(r["timeline-bars"]) + int(r["timeline-columns"]) > 0
    # the first super-tile is selected at load, so its leaf's CTA grid is drawn
    leaf = next(x for x in trace["job"]["leaves"] if x["name"] in ("main", "step"))
    cta = 1
    for g in leaf["grid"]:
        cta *= g
    assert int(r["cta-count"]) == cta and "cta-canvas" in dom.by_id
    # the summary table has one row per node
    assert dom.by_id["summary-table"] is not None
    if fail_node is None:
        assert r["failures"] == "0" and r["replanned-events"] == "0"
    else:
        assert r["failures"] == "1"
        assert int(r["replanned-events"]) == sum(e["replanned"] for e in instructions(trace)) > 0
        assert int(r["replanned-supertiles"]) > 0
        assert dom.by_id["failure-list"] is not None


def test_the_cluster_line_is_hidden_by_default_and_shown_on_request(tmp_path):
    trace = make_trace("flash_attention", nodes=2, size=4)
    _, cluster = render(tmp_path, trace)
    assert cluster.report["view"] == "cluster" and cluster.report["cluster-line-hidden"] == "true"
    assert cluster.report["cluster-lines"] == "1"
    assert cluster.class_counts.get("cluster-attr") == 1
    _, shown = render(tmp_path, trace, fragment="#cluster-line=shown")
    assert shown.report["cluster-line-hidden"] == "false"
    _, single = render(tmp_path, trace, fragment="#view=single")
    assert single.report["view"] == "single" and single.report["cluster-line-hidden"] == "true"
    assert single.report["single-gpu-ctas"] == str(4 * 1024 // 32)  # Nq / BR (BR = 32 on one GPU)
    # every source line is still in the page; only the @cluster one is hidden
    assert single.report["code-lines"] == str(len(trace["job"]["source"].rstrip("\n").split("\n")))


def test_hostile_source_is_shown_as_text(tmp_path):
    trace = make_trace("add", nodes=2, size=2)
    trace["job"]["source"] = "// </script><script>document.title='pwned'</script>\n" + trace["job"]["source"]
    page = tmp_path / "run.html"
    write_report(trace, page)
    run = dump_dom(page, tmp_path / "profile")
    dom = parse_dom(run.stdout)
    assert dom.js_errors == [] and dom.report["rendered"] == "true"
    assert "pwned" not in run.stdout.split("<title>")[1].split("</title>")[0]
    # the hostile line is one line of code, shown as text
    assert dom.report["code-lines"] == str(len(trace["job"]["source"].rstrip("\n").split("\n")))


def test_ten_thousand_instructions_render_with_all_node_rows(tmp_path):
    # add: 7 instructions per super-tile; 1500 super-tiles on 8 nodes is 10,500 instructions.
    trace = make_trace("add", nodes=8, size=1500)
    assert len(instructions(trace)) >= 10_000
    _, dom = render(tmp_path, trace)
    r = dom.report
    assert r["node-rows"] == "8" and int(r["events"]) == len(instructions(trace))
    assert r["supertiles"] == "1500"
    # at the whole-run zoom most bars are narrower than a pixel: they are summed into columns
    assert int(r["timeline-columns"]) > 0


def test_screenshot_of_a_run_with_a_failure(tmp_path):
    page = tmp_path / "run.html"
    write_report(make_trace("matmul", nodes=3, fail_node=1), page)
    png = tmp_path / "matmul.png"
    run = screenshot(page, png, tmp_path / "profile", size="1400,1600")
    assert run.uncaught_errors() == []
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000  # a blank page compresses to far less


def test_page_answers_input_events(tmp_path):
    """The page's #selftest drives it with synthetic clicks, wheel, drag and hover events."""
    import json

    trace = make_trace("matmul", nodes=3, fail_node=1)
    _, dom = render(tmp_path, trace, fragment="#selftest")
    out = json.loads(dom.report["selftest"])
    # hidden by default in both views; the toggle shows it, and hides it again
    assert out["singleHidden"] == "true" and out["clusterHidden"] == "true"
    assert out["toggledHidden"] == "false" and out["toggledBackHidden"] == "true"
    assert out["wheelZoom"] == pytest.approx(0.5, rel=0.01)
    assert out["dragMovedRight"] is True and out["resetStart"] == 0
    assert out["tooltip"] == out["expected"]
    assert out["clickedUnit"] == out["expectedUnit"] != "0"


def test_zoomed_in_bars_are_drawn_one_by_one(tmp_path):
    trace = make_trace("add", nodes=2, size=200)
    _, whole = render(tmp_path, trace)
    first_end = min(e["end"] for e in trace["events"] if e["kind"] == "load")
    _, zoomed = render(tmp_path, trace, fragment=f"#zoom=0,{first_end * 3}")
    assert float(zoomed.report["zoom-end"]) == pytest.approx(first_end * 3)
    assert int(zoomed.report["timeline-columns"]) < int(whole.report["timeline-columns"])
    assert int(zoomed.report["timeline-bars"]) > 0


def test_a_minimal_trace_renders_empty_panels(tmp_path):
    # A job that failed before any node ran anything still gets a page, without script errors.
    _, dom = render(tmp_path, {"format": "phobos-trace/1", "job": {"kernel": "add"}})
    r = dom.report
    assert (r["nodes"], r["node-rows"], r["supertiles"], r["events"]) == ("0", "0", "0", "0")


def test_the_harness_sees_script_errors(tmp_path):
    # The checks above would pass vacuously if errors went unseen: a page that throws must show up
    # both in #js-errors (the page's own hook) and as "Uncaught" in Chromium's log.
    from scheduler.report.page import _asset

    page = tmp_path / "broken.html"
    page.write_text(f"<html><head><script>{_asset('error_hook.js')}</script></head><body>"
                    "<div id='js-errors'></div><script>undefinedFunction();</script></body></html>")
    run = dump_dom(page, tmp_path / "profile")
    assert any("undefinedFunction" in line for line in run.uncaught_errors())
    assert any("undefinedFunction" in text for text in parse_dom(run.stdout).js_errors)
