"""common/pipeline.py: the one runner every pipeline of phobos (front end, CUDA, cluster, the
scheduler's job checks) uses: order, stop-after, each stage's output seen, timings."""

from __future__ import annotations

import pytest

from common.pipeline import Stage, dump_selection, format_timings, names, run_stages, selected

STAGES = (
    Stage("double", lambda x: x * 2),
    Stage("add one", lambda x: x + 1),
    Stage("square", lambda x: x * x),
)


def test_stages_run_in_order_on_the_state():
    assert run_stages(STAGES, 3) == 49  # (3 * 2 + 1) ** 2
    assert names(STAGES) == ("double", "add one", "square")


def test_until_stops_after_the_named_stage():
    assert run_stages(STAGES, 3, until="double") == 6
    assert run_stages(STAGES, 3, until="add one") == 7


def test_an_unknown_until_names_the_stages():
    with pytest.raises(ValueError, match=r"no job check 'cube'; stages: double, add one, square"):
        run_stages(STAGES, 3, until="cube", what="job check")


def test_each_stage_output_is_seen_and_timed():
    seen, timings = [], []
    run_stages(STAGES, 3, until="add one", timings=timings,
               after_each=lambda i, name, s: seen.append((i, name, s)))
    assert seen == [(0, "double", 6), (1, "add one", 7)]
    assert [name for name, _ in timings] == ["double", "add one"]
    assert all(seconds >= 0 for _, seconds in timings)
    lines = format_timings(timings).splitlines()
    assert len(lines) == 2 and lines[0].startswith("double ") and lines[1].endswith(" ms")


def test_a_stage_tuple_unpacks_as_name_and_function():
    (name, run), *_ = STAGES
    assert name == "double" and run(5) == 10


def test_a_failing_stage_stops_the_pipeline():
    ran = []

    def refuse(_):
        raise ValueError("bad job")

    stages = (Stage("check", refuse), Stage("write", ran.append))
    with pytest.raises(ValueError, match="bad job"):
        run_stages(stages, 1)
    assert ran == []


@pytest.mark.parametrize("text, want", [
    ("1", True), ("all", True), (True, True), ("", False), (None, False), (False, False),
    ("check, bind", {"check", "bind"}),
])
def test_dump_selection(text, want):
    assert dump_selection(text) == want


def test_selected():
    assert selected(True, "x") and not selected(False, "x")
    assert selected({"x"}, "x") and not selected({"y"}, "x")
